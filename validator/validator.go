// Package validator is the node agent that checks a sandbox node's operands
// and publishes what the operator needs from the node: the VFIO manager
// reports ready, the resources the device plugin advertises have reached the
// Node, and the plugin's KubeVirt permittedHostDevices are on the Node (as
// the names.PermittedAnnotation) for the operator to merge into the
// KubeVirt CR. It writes only its own Node, and only when something changed.
package validator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode"
	"github.com/sandbox-gpu/sandbox-gpu/internal/promreg"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// Options configure a Validator. Paths are host paths as mounted.
type Options struct {
	NodeName string
	Client   kubernetes.Interface
	// VFIOReadyFile is the VFIO manager's readiness file, checked when the
	// Node's deploy labels run the VFIO manager.
	VFIOReadyFile string
	// PermittedFile is the KubeVirt device plugin's permittedHostDevices
	// file, published when the Node's deploy labels run that plugin.
	PermittedFile string
	// VGPUReadyFile is the vGPU device manager's report, checked when the
	// Node's deploy labels run that manager.
	VGPUReadyFile string
	// Resync re-checks without an event (default 1m).
	Resync time.Duration
	Log    logr.Logger
	// Registerer receives the validator's metrics; nil keeps them
	// unregistered.
	Registerer prometheus.Registerer
}

// Report is the validator's view, served on /readyz.
type Report struct {
	Ready    bool      `json:"ready"`
	Time     time.Time `json:"time"`
	Problems []string  `json:"problems,omitempty"`
}

// Validator runs the checks.
type Validator struct {
	o       Options
	mu      sync.Mutex
	report  Report
	watch   *ownnode.Watcher // its Node, once Run started
	metrics metrics
	// expires is when the VFIO manager's last heartbeat runs out.
	expires time.Time
}

type metrics struct {
	ready    prometheus.Gauge
	problems prometheus.Gauge
	checks   *prometheus.CounterVec
	patches  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (metrics, error) {
	m := metrics{
		ready: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_gpu_validator_ready",
			Help: "1 while every check of the node passes."}),
		problems: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_gpu_validator_problems",
			Help: "Problems found by the last check."}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_gpu_validator_checks_total",
			Help: "Checks by result (ready, not_ready)."}, []string{"result"}),
		patches: ownnode.PatchCounter("validator", "the permitted host devices annotation"),
	}
	return m, promreg.Register(reg, "validator", m.ready, m.problems, m.checks, m.patches)
}

// New validates the options.
func New(o Options) (*Validator, error) {
	if err := ownnode.Check("validator", o.NodeName, o.Client); err != nil {
		return nil, err
	}
	if o.Resync <= 0 {
		o.Resync = time.Minute
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	return &Validator{o: o, report: Report{Problems: []string{"not checked yet"}}, metrics: m}, nil
}

// Report returns the last result.
func (v *Validator) Report() Report {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.report
	r.Problems = append([]string(nil), r.Problems...)
	return r
}

// Run watches its own Node and the operand files and checks on every change
// and resync until ctx ends.
func (v *Validator) Run(ctx context.Context) error {
	nw, err := ownnode.Watch(ctx, v.o.Client, v.o.NodeName, ownnode.Always)
	if nw == nil {
		if err == nil {
			err = ctx.Err()
		}
		return err
	}
	v.watch = nw
	var dirs []string
	// Each writer's file is in its own folder (names.WriterDir).
	for _, f := range []string{v.o.VFIOReadyFile, v.o.PermittedFile, v.o.VGPUReadyFile} {
		if f == "" || slices.Contains(dirs, filepath.Dir(f)) {
			continue
		}
		dir := filepath.Dir(f)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		dirs = append(dirs, dir)
	}
	// The timer wakes the check when the VFIO manager's heartbeat runs
	// out: a killed daemon writes no event.
	return nw.Loop(ctx, ownnode.LoopOptions{Resync: v.o.Resync, Dirs: dirs, Log: v.o.Log}, func() time.Duration {
		r := v.check(ctx)
		v.o.Log.V(1).Info("Checked", "node", v.o.NodeName, "ready", r.Ready, "problems", r.Problems)
		if v.expires.IsZero() {
			return 0
		}
		return max(time.Until(v.expires)+10*time.Millisecond, time.Millisecond)
	})
}

// check runs the checks that the Node's deploy labels call for, and
// publishes the permittedHostDevices when they differ from the Node's
// annotation.
func (v *Validator) check(ctx context.Context) Report {
	var problems []string
	node, ok := v.watch.Node()
	switch {
	case !ok:
		problems = append(problems, fmt.Sprintf("node %s: not found", v.o.NodeName))
	default:
		deployed := func(operand string) bool { return node.Labels[names.DeployLabel(operand)] == "true" }
		if deployed(names.VFIOManager) {
			if p := v.checkVFIO(); p != "" {
				problems = append(problems, p)
			}
		}
		if deployed(names.VGPUDeviceManager) {
			if p := v.checkVGPU(); p != "" {
				problems = append(problems, p)
			}
		}
		if deployed(names.KubeVirtDevicePlugin) && v.o.PermittedFile != "" {
			problems = append(problems, v.publish(ctx, node)...)
		}
	}
	sort.Strings(problems)
	r := Report{Ready: len(problems) == 0, Time: time.Now(), Problems: problems}
	v.metrics.problems.Set(float64(len(problems)))
	if r.Ready {
		v.metrics.ready.Set(1)
		v.metrics.checks.WithLabelValues("ready").Inc()
	} else {
		v.metrics.ready.Set(0)
		v.metrics.checks.WithLabelValues("not_ready").Inc()
	}
	v.mu.Lock()
	changed := fmt.Sprint(v.report.Problems) != fmt.Sprint(r.Problems)
	v.report = r
	v.mu.Unlock()
	if changed {
		v.o.Log.Info("Validation changed", "node", v.o.NodeName, "ready", r.Ready, "problems", r.Problems)
	}
	return r
}

func (v *Validator) checkVFIO() string {
	if v.o.VFIOReadyFile == "" {
		return ""
	}
	v.expires = time.Time{}
	r, err := wire.ReadVFIOReady(v.o.VFIOReadyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("VFIO manager: %s does not exist yet", v.o.VFIOReadyFile)
	}
	if err != nil {
		return fmt.Sprintf("VFIO manager: %v", err)
	}
	v.expires = r.Expires
	if ok, why := r.Judge(time.Now()); !ok {
		return "VFIO manager: not ready: " + why
	}
	return ""
}

// checkVGPU reads the vGPU device manager's report: the node is ready only
// once the selected config is applied on every GPU (a refusal, such as a
// vGPU in use that the config would remove, or a config error is a problem).
func (v *Validator) checkVGPU() string {
	if v.o.VGPUReadyFile == "" {
		return ""
	}
	r, err := wire.ReadVGPUReady(v.o.VGPUReadyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("vGPU device manager: %s does not exist yet", v.o.VGPUReadyFile)
	}
	if err != nil {
		return fmt.Sprintf("vGPU device manager: %v", err)
	}
	switch {
	case r.State == wire.VGPUStateSuccess:
		return ""
	case r.Error != "":
		return fmt.Sprintf("vGPU device manager: config %q not applied: %s", r.Config, r.Error)
	case len(r.Refused) > 0:
		reasons := make([]string, 0, len(r.Refused))
		for _, x := range r.Refused {
			reasons = append(reasons, fmt.Sprintf("%s: %s", x.Address, x.Reason))
		}
		return fmt.Sprintf("vGPU device manager: config %q not applied on %s", r.Config, strings.Join(reasons, "; "))
	}
	return fmt.Sprintf("vGPU device manager: config %q is %s", r.Config, r.State)
}

// publish keeps the Node's annotation equal to the plugin's file and
// reports resources the Node does not advertise yet.
func (v *Validator) publish(ctx context.Context, node *corev1.Node) []string {
	var problems []string
	p, err := wire.ReadPermitted[kubevirtv1.PermittedHostDevices](v.o.PermittedFile)
	if errors.Is(err, fs.ErrNotExist) {
		return []string{fmt.Sprintf("KubeVirt device plugin: %s does not exist yet", v.o.PermittedFile)}
	}
	if err != nil {
		return []string{fmt.Sprintf("KubeVirt device plugin: %v", err)}
	}
	compact, err := wire.EncodePermitted(p)
	if err != nil {
		return []string{err.Error()}
	}
	for _, res := range Resources(p) {
		if q, ok := node.Status.Allocatable[corev1.ResourceName(res)]; !ok || q.IsZero() {
			problems = append(problems, fmt.Sprintf("node %s: resource %s is not allocatable yet", v.o.NodeName, res))
		}
	}
	if node.Annotations[names.PermittedAnnotation] == compact {
		return problems
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{names.PermittedAnnotation: compact}}})
	sent, err := v.watch.Patch(ctx, node, patch)
	ownnode.CountPatch(v.metrics.patches, sent, err)
	if err != nil {
		return append(problems, fmt.Sprintf("publish %s: %v", names.PermittedAnnotation, err))
	}
	if !sent {
		return problems // sent; the watch has not caught up yet
	}
	v.o.Log.Info("Published permittedHostDevices", "node", v.o.NodeName, "resources", strings.Join(Resources(p), ","))
	return problems
}

// Resources lists the resource names of the entries, sorted.
func Resources(p kubevirtv1.PermittedHostDevices) []string {
	var out []string
	for _, e := range p.PciHostDevices {
		out = append(out, e.ResourceName)
	}
	for _, e := range p.MediatedDevices {
		out = append(out, e.ResourceName)
	}
	sort.Strings(out)
	return out
}
