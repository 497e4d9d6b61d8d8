package vfio

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostlock"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/promreg"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// DaemonOptions configure a Daemon.
type DaemonOptions struct {
	Host HostView
	// Desired is used when ConfigFile is empty.
	Desired Desired
	// ConfigFile holds the desired state; it is watched for changes.
	ConfigFile string
	// ReadyDir receives names.VFIOReadyFile; empty disables the file.
	ReadyDir string
	// LockFile, when set, is flocked around every reconcile.
	LockFile string
	// Resync is the period of the safety-net reconcile (default 5m).
	Resync time.Duration
	// Retry reconciles again this soon after a reconcile that refused a
	// function (in use: a VM, a container, NVIDIA's device plugin still
	// stopping) or failed (default 10s, at most Resync).
	Retry time.Duration
	// Heartbeat is how often the readiness file is rewritten while the
	// daemon lives (default 10s); readers take a file whose heartbeat is
	// older than three of these as a dead daemon's.
	Heartbeat time.Duration
	Log       logr.Logger
	// Allocations, when set, tells which functions the kubelet allocated to
	// pods: those count as in use (asked at plan time and again right
	// before each unbind).
	Allocations Allocations
	// Registerer receives the daemon's metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// OnReport, when set, gets the report of every reconcile (a release
	// daemon publishes it on its Node).
	OnReport func(ctx context.Context, rep *ReadyReport)
	// VMGPUsFrom, when set, gives the node's split at every reconcile (the
	// Node's annotation); it overrides Desired.VMGPUs, and each change of
	// it reconciles.
	VMGPUsFrom *Declaration
	// ModelNames are the pci.ids names of the vendor's devices by device
	// id, for model:NAME declarations (nil: models by id only).
	ModelNames map[uint16]string
}

// Daemon holds a desired state and reconciles the host towards it. It
// never unbinds a function in use, and it changes nothing on shutdown.
type Daemon struct {
	opts    DaemonOptions
	held    atomic.Bool // Run holds the lock for its life (release)
	mu      sync.Mutex
	ready   bool
	last    *ReadyReport
	warned  string // the warnings last logged, logged again only on change
	metrics daemonMetrics
}

type daemonMetrics struct {
	reconciles *prometheus.CounterVec
	functions  *prometheus.GaugeVec
	ready      prometheus.Gauge
}

// NewDaemon validates the options.
func NewDaemon(opts DaemonOptions) (*Daemon, error) {
	if opts.Host == nil {
		return nil, errors.New("daemon: no host")
	}
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Minute
	}
	if opts.Retry <= 0 {
		opts.Retry = 10 * time.Second
	}
	opts.Retry = min(opts.Retry, opts.Resync)
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 10 * time.Second
	}
	if opts.ConfigFile == "" {
		if _, _, err := opts.Desired.Selections(); err != nil {
			return nil, err
		}
	}
	if opts.VMGPUsFrom != nil && (opts.Desired.Release || len(opts.Desired.Devices) > 0 || len(opts.Desired.Host) > 0) {
		return nil, fmt.Errorf("daemon: %w: the GPUs split by %s: no release, devices or host", ErrBadInput, opts.VMGPUsFrom.Source)
	}
	d := &Daemon{opts: opts}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	d.metrics = daemonMetrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_gpu_vfio_reconciles_total",
			Help: "Reconciles by result (ok, refused, error)."}, []string{"result"}),
		functions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sandbox_gpu_vfio_functions",
			Help: "Selected functions by state after the last reconcile (vfio, refused)."}, []string{"state"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_gpu_vfio_ready", Help: "1 when the node is ready."}),
	}
	if err := promreg.Register(reg, "daemon", d.metrics.reconciles, d.metrics.functions, d.metrics.ready); err != nil {
		return nil, err
	}
	return d, nil
}

// Run reconciles at start, on every change of the config file, every
// Resync and Retry after a reconcile that refused or failed, until ctx
// ends. On return the readiness file is removed and no
// function is moved.
func (d *Daemon) Run(ctx context.Context) error {
	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	if d.opts.ConfigFile != "" {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return fmt.Errorf("daemon: watch config: %w", err)
		}
		defer w.Close()
		// Watch the folder: ConfigMap updates replace the file by rename.
		if err := w.Add(filepath.Dir(d.opts.ConfigFile)); err != nil {
			return fmt.Errorf("daemon: watch config %s: %w", d.opts.ConfigFile, err)
		}
		events, watchErrs = w.Events, w.Errors
	}
	defer d.clearReady()
	if d.releasing() {
		// A release holds the host lock for its whole life: a VFIO manager
		// of the config being left (an old pod still terminating) or a
		// host-side vfio-manager cannot bind a function back meanwhile.
		unlock, err := d.lockForLife(ctx)
		if err != nil {
			return err
		}
		if unlock == nil {
			return nil // ctx ended while waiting
		}
		defer unlock()
	}
	var declChanged <-chan struct{}
	if d.opts.VMGPUsFrom != nil {
		declChanged = d.opts.VMGPUsFrom.Changed
	}
	tick := time.NewTicker(d.opts.Resync)
	defer tick.Stop()
	beat := time.NewTicker(d.opts.Heartbeat)
	defer beat.Stop()
	retry := time.NewTimer(d.opts.Retry)
	retry.Stop()
	defer retry.Stop()
	why := "start"
	for {
		if why != "" {
			if d.reconcileAndLog(ctx, why) {
				retry.Reset(d.opts.Retry)
			} else {
				retry.Stop()
			}
		}
		why = ""
		select {
		case <-ctx.Done():
			d.opts.Log.Info("Stopping; functions stay where they are")
			return nil
		case ev := <-events:
			if filepath.Base(ev.Name) == filepath.Base(d.opts.ConfigFile) || ev.Has(fsnotify.Create) {
				why = "config changed"
			}
		case err := <-watchErrs:
			// Events may have been lost (queue overflow): reconcile anyway.
			d.opts.Log.Error(err, "Watching the config file", "path", d.opts.ConfigFile)
			why = "watch error"
		case <-declChanged:
			why = "vm-gpus changed"
		case <-tick.C:
			why = "resync"
		case <-retry.C:
			why = "retry"
		case <-beat.C:
			d.heartbeat()
		}
	}
}

// reconcileAndLog reconciles and logs what moved and what did not; it
// reports whether to try again soon (a refusal or a failure).
func (d *Daemon) reconcileAndLog(ctx context.Context, why string) bool {
	rep, err := d.Reconcile(ctx)
	log := d.opts.Log.WithValues("trigger", why)
	if err != nil {
		log.Error(err, "Reconcile failed")
		return true
	}
	for _, a := range rep.Actions {
		log.Info("Moved function", "address", a.Address, "from", a.From, "to", a.To)
	}
	for _, r := range rep.Refused {
		log.Info("Left function as it is", "address", r.Address, "reason", r.Reason)
	}
	log.V(1).Info("Reconciled", "vfio", len(rep.VFIO), "refused", len(rep.Refused))
	return len(rep.Refused) > 0
}

// Reconcile moves the host one step towards the desired state and updates
// readiness.
func (d *Daemon) Reconcile(ctx context.Context) (*ReadyReport, error) {
	rep, err := d.reconcile(ctx)
	if err != nil {
		d.metrics.reconciles.WithLabelValues("error").Inc()
		failed := &ReadyReport{Time: time.Now(), Error: err.Error(), Reason: "cannot reconcile: " + err.Error(), Actions: []Action{}, Refused: []Refusal{}, VFIO: []string{}}
		d.setReady(failed)
		if d.opts.OnReport != nil {
			d.opts.OnReport(ctx, failed)
		}
		return nil, err
	}
	result := "ok"
	if len(rep.Refused) > 0 {
		result = "refused"
	}
	d.metrics.reconciles.WithLabelValues(result).Inc()
	d.metrics.functions.WithLabelValues("vfio").Set(float64(len(rep.VFIO)))
	d.metrics.functions.WithLabelValues("refused").Set(float64(len(rep.Refused)))
	d.setReady(rep)
	if d.opts.OnReport != nil {
		d.opts.OnReport(ctx, rep)
	}
	return rep, nil
}

func (d *Daemon) reconcile(ctx context.Context) (*ReadyReport, error) {
	if d.opts.LockFile != "" && !d.lockHeld() {
		release, err := hostlock.Acquire(ctx, d.opts.LockFile)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	desired := d.opts.Desired
	if d.opts.ConfigFile != "" {
		var err error
		if desired, err = LoadDesired(d.opts.ConfigFile); err != nil {
			return nil, err
		}
	}
	toVFIO, toHost, err := desired.Selections()
	if err != nil {
		return nil, err
	}
	toVFIO.IgnoreMissing, toHost.IgnoreMissing = true, true
	split, err := d.split(ctx, desired, toVFIO.Vendor)
	if err != nil {
		return nil, err
	}
	if split != nil && !split.all {
		toVFIO, toHost = split.Selections(toVFIO.Vendor)
	}
	rep := &ReadyReport{Time: time.Now(), Actions: []Action{}, Refused: []Refusal{}, VFIO: []string{}, Split: split}
	for _, step := range []struct {
		sel    Selection
		target Target
	}{{toHost, ToHost}, {toVFIO, ToVFIO}} {
		if !step.sel.All && len(step.sel.Devices) == 0 {
			continue
		}
		planner, err := NewPlanner(d.opts.Host)
		if err != nil {
			return nil, err
		}
		d.warn(planner.Warnings)
		planner.UseKubelet(ctx, d.opts.Allocations)
		plan, err := planner.Plan(step.sel, step.target)
		if err != nil {
			return nil, err
		}
		res := Apply(ctx, d.opts.Host, plan, ApplyOptions{Allocations: d.opts.Allocations})
		rep.Actions = append(rep.Actions, res.Actions...)
		rep.Refused = append(rep.Refused, res.Refused...)
		if step.target == ToVFIO {
			for _, a := range plan.Selected {
				if f, err := d.opts.Host.ReadFunction(a); err == nil && host.IsVFIODriver(f.Driver) {
					rep.VFIO = append(rep.VFIO, string(a))
				}
			}
		}
	}
	rep.Ready, rep.Reason = judgeRefusals(rep.Refused)
	if split != nil {
		if err := d.judgeSplit(rep); err != nil {
			return nil, err
		}
	}
	if desired.Release {
		if err := d.judgeRelease(rep, toHost); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// warn logs planning warnings when they differ from the last ones.
func (d *Daemon) warn(ws []string) {
	text := strings.Join(ws, "\n")
	d.mu.Lock()
	changed := text != d.warned
	d.warned = text
	d.mu.Unlock()
	if changed {
		LogWarnings(d.opts.Log, ws)
	}
}

func (d *Daemon) setReady(rep *ReadyReport) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ready, d.last = rep.Ready, rep
	if rep.Ready {
		d.metrics.ready.Set(1)
	} else {
		d.metrics.ready.Set(0)
	}
	d.writeReadyLocked()
}

// heartbeat rewrites the readiness file with a new heartbeat.
func (d *Daemon) heartbeat() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last != nil {
		d.writeReadyLocked()
	}
}

// writeReadyLocked writes the last report, ready or not (readers then
// know why), stamped with this process and a fresh heartbeat.
func (d *Daemon) writeReadyLocked() {
	if d.opts.ReadyDir == "" {
		return
	}
	p := filepath.Join(d.opts.ReadyDir, names.VFIOReadyFile)
	rep := d.last.Wire()
	now := time.Now()
	rep.PID, rep.Heartbeat, rep.Expires = os.Getpid(), now, now.Add(3*d.opts.Heartbeat)
	if err := wire.WriteVFIOReady(p, rep); err != nil {
		d.opts.Log.Error(err, "Cannot write readiness file", "path", p)
	}
}

// clearReady removes the readiness file on a graceful stop: nobody is
// there to keep it true.
func (d *Daemon) clearReady() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ready, d.last = false, &ReadyReport{Time: time.Now(), Error: "stopped"}
	d.metrics.ready.Set(0)
	if d.opts.ReadyDir == "" {
		return
	}
	p := filepath.Join(d.opts.ReadyDir, names.VFIOReadyFile)
	if err := wire.RemoveVFIOReady(p); err != nil {
		d.opts.Log.Error(err, "Cannot remove readiness file", "path", p)
	}
}

// Readiness is the daemon's readiness check (the shell serves it on
// /readyz): ready with the last report, or not ready before the first
// reconcile and after a failed one.
func (d *Daemon) Readiness() (bool, any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last == nil {
		return false, &ReadyReport{Error: "not reconciled yet"}
	}
	return d.ready, d.last
}
