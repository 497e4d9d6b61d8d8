// Package discovery is the GPU discovery agent (sandbox-gpu-validator
// discover): it finds the node's NVIDIA GPUs in sysfs through the host
// model and labels its own Node with names.GPUPresentLabel=true,
// names.GPUCountLabel=N and names.GPUDriverLabel (which of NVIDIA's host
// drivers the kernel runs: datacenter, vgpu-host or none, which the
// operator waits for when a node changes drivers) while it has any,
// removing them when they are gone, so that the operator finds GPU nodes
// without Node Feature Discovery. It watches only its own Node, writes
// only that Node's three labels, and only
// when they differ from what it found: a steady node costs no write.
package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode"
	"github.com/sandbox-gpu/sandbox-gpu/internal/promreg"
)

// Options configure an Agent.
type Options struct {
	NodeName string
	Client   kubernetes.Interface
	// Host is the host model the GPUs are read through.
	Host HostView
	// Resync scans again without an event (default 1m): GPUs that appear or
	// go (hot plug, a card taken out) reach the labels within it.
	Resync time.Duration
	// DriverPoll checks which NVIDIA driver the kernel runs this often (two
	// stat calls of /sys/module) and scans at once when it changed (default
	// 5s): sysfs gives no event for a module load, and the operator waits for
	// the driver label while it changes a node's driver.
	DriverPoll time.Duration
	Log        logr.Logger
	// Registerer receives the agent's metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
}

// Report is the agent's last result, served on /readyz.
type Report struct {
	// Ready: the last scan worked and the Node carries its labels.
	Ready bool `json:"ready"`
	// GPUs found by the last scan that worked.
	GPUs int `json:"gpus"`
	// Driver is the NVIDIA host driver the last scan found
	// (host.NVIDIADriver).
	Driver string    `json:"driver,omitempty"`
	Time   time.Time `json:"time"`
	Error  string    `json:"error,omitempty"`
}

// Agent labels its own Node from sysfs.
type Agent struct {
	o       Options
	metrics metrics
	watch   *ownnode.Watcher // its Node, once Run started

	mu     sync.Mutex
	report Report
}

type metrics struct {
	gpus    prometheus.Gauge
	scans   *prometheus.CounterVec
	patches *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (metrics, error) {
	m := metrics{
		gpus: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_gpu_discovery_gpus",
			Help: "NVIDIA GPUs (physical functions) found by the last scan that worked."}),
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_gpu_discovery_scans_total",
			Help: "Scans of the host by result (ok, failed)."}, []string{"result"}),
		patches: ownnode.PatchCounter("discovery", "its GPU labels"),
	}
	return m, promreg.Register(reg, "discovery", m.gpus, m.scans, m.patches)
}

// New validates the options.
func New(o Options) (*Agent, error) {
	if err := ownnode.Check("discovery", o.NodeName, o.Client); err != nil {
		return nil, err
	}
	if o.Host == nil {
		return nil, errors.New("discovery: no host model")
	}
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
	if o.DriverPoll <= 0 {
		o.DriverPoll = 5 * time.Second
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	return &Agent{o: o, metrics: m, report: Report{Error: "not scanned yet"}}, nil
}

// Report returns the last result.
func (a *Agent) Report() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.report
}

// CountGPUs counts the NVIDIA GPUs of a scan: functions of NVIDIA's vendor
// id with the GPU role (VGA or 3D controller) that are no SR-IOV virtual
// function, so a GPU with vGPU VFs counts once. NVSwitches and a card's
// audio, USB and UCSI functions do not count.
func CountGPUs(s *host.Snapshot) int {
	n := 0
	for _, f := range s.Functions {
		if f.Vendor == host.VendorNVIDIA && f.Role == host.RoleGPU && f.PhysFn == "" {
			n++
		}
	}
	return n
}

// Labels are the agent's labels for a node with gpus GPUs on an NVIDIA
// host driver (host.NVIDIADriver): all while it has any, none without.
func Labels(gpus int, driver string) map[string]string {
	if gpus == 0 {
		return map[string]string{}
	}
	return map[string]string{names.GPUPresentLabel: "true", names.GPUCountLabel: strconv.Itoa(gpus), names.GPUDriverLabel: driver}
}

// owned are the labels the agent sets and removes; no other is touched.
func owned() []string {
	return []string{names.GPUPresentLabel, names.GPUCountLabel, names.GPUDriverLabel}
}

// Run watches its own Node and scans at start, whenever one of its labels
// changes under it, and every Resync, until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	// Only a change of the agent's own labels needs a look: the kubelet's
	// status updates do not.
	w, err := ownnode.Watch(ctx, a.o.Client, a.o.NodeName, func(old, cur *corev1.Node) bool {
		return old == nil || cur != nil && ownedDiffer(old.Labels, cur.Labels)
	})
	if w == nil {
		if err == nil {
			err = ctx.Err()
		}
		return err
	}
	a.watch = w
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		a.pollDriver(ctx, w)
	}()
	defer func() { <-polled }()
	return w.Loop(ctx, ownnode.LoopOptions{Resync: a.o.Resync, Log: a.o.Log}, func() time.Duration {
		a.sync(ctx)
		return 0
	})
}

// pollDriver wakes the loop when the NVIDIA driver differs from the one
// the last scan found, until ctx ends.
func (a *Agent) pollDriver(ctx context.Context, w *ownnode.Watcher) {
	tick := time.NewTicker(a.o.DriverPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if d, err := a.o.Host.NVIDIADriver(); err == nil && d != a.Report().Driver {
			w.Poke()
		}
	}
}

func ownedDiffer(a, b map[string]string) bool {
	for _, k := range owned() {
		va, oka := a[k]
		vb, okb := b[k]
		if oka != okb || va != vb {
			return true
		}
	}
	return false
}

// sync scans the host and brings the Node's labels in line, writing only
// when they differ.
func (a *Agent) sync(ctx context.Context) {
	r := Report{Time: time.Now()}
	defer func() {
		a.mu.Lock()
		changed := a.report.Ready != r.Ready || a.report.GPUs != r.GPUs || a.report.Driver != r.Driver || a.report.Error != r.Error
		a.report = r
		a.mu.Unlock()
		if changed {
			a.o.Log.Info("Discovery changed", "node", a.o.NodeName, "ready", r.Ready, "gpus", r.GPUs, "driver", r.Driver, "error", r.Error)
		}
	}()
	snap, err := a.o.Host.Scan()
	if err != nil {
		// The labels stay as they are: a failed read is no proof that the
		// GPUs are gone.
		a.metrics.scans.WithLabelValues("failed").Inc()
		r.Error = fmt.Sprintf("scan the host: %v", err)
		return
	}
	driver, err := a.o.Host.NVIDIADriver()
	if err != nil {
		a.metrics.scans.WithLabelValues("failed").Inc()
		r.Error = fmt.Sprintf("read the NVIDIA driver: %v", err)
		return
	}
	a.metrics.scans.WithLabelValues("ok").Inc()
	r.GPUs, r.Driver = CountGPUs(snap), driver
	a.metrics.gpus.Set(float64(r.GPUs))
	node, ok := a.watch.Node()
	if !ok {
		r.Error = fmt.Sprintf("node %s: not found", a.o.NodeName)
		return
	}
	patch := labelPatch(node.Labels, Labels(r.GPUs, r.Driver))
	if patch == nil {
		r.Ready = true
		return
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": patch}})
	if err != nil {
		r.Error = fmt.Sprintf("node %s: label patch: %v", a.o.NodeName, err)
		return
	}
	sent, err := a.watch.Patch(ctx, node, body)
	ownnode.CountPatch(a.metrics.patches, sent, err)
	if err != nil {
		r.Error = fmt.Sprintf("set labels: %v", err)
		return
	}
	if !sent {
		r.Ready = true // sent; the watch has not caught up yet
		return
	}
	a.o.Log.Info("Labelled node", "node", a.o.NodeName, "gpus", r.GPUs, "patch", string(body))
	r.Ready = true
}

// labelPatch is the merge patch of the owned labels that turns current
// into want (nil values remove), or nil when nothing differs.
func labelPatch(current, want map[string]string) map[string]*string {
	var patch map[string]*string
	for _, k := range owned() {
		cur, has := current[k]
		w, wanted := want[k]
		if has == wanted && cur == w {
			continue
		}
		if patch == nil {
			patch = map[string]*string{}
		}
		if wanted {
			patch[k] = &w
		} else {
			patch[k] = nil
		}
	}
	return patch
}
