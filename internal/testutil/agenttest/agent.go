// Package agenttest plays GPU nodes in process, for tests and the demo
// (never a shipped binary: internal/archtest keeps *test packages out of
// them). An Agent is one node's DaemonSet controller and kubelet: it
// follows its Node's deploy labels (sandbox-gpu.io/deploy.<operand>) and
// release labels (sandbox-gpu.io/release.<operand>), runs the real operand
// code (the VFIO manager, its release, the vGPU device manager, its
// release, the KubeVirt device plugin, the validator) against a simulated
// host (hostsim) while the label is there and stops it when the label
// goes, and keeps each operand's pod Ready while the operand's own
// readiness (its /readyz) says so. A stand-in kubelet takes the device
// plugin's registration (the Node's capacity and allocatable follow) and
// serves PodResources allocations a test sets. Kill stops an operand as
// kill -9 would (no cleanup) and lets the kubelet restart it.
package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sandbox-gpu/sandbox-gpu/discovery"
	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
	"github.com/sandbox-gpu/sandbox-gpu/validator"
)

// Options describe one simulated node.
type Options struct {
	// Node is the Node's name; it must exist (or come) in the API server.
	Node string
	// Fixture is the hostsim fixture of its host; "" for a node without a
	// simulated host (operands that need one fail to start there).
	Fixture string
	// Dir holds the host tree and the node's folders (run, device plugins).
	Dir       string
	Namespace string // of the operand pods
	Client    kubernetes.Interface
	Log       logr.Logger
	// VGPUConfig is the vGPU device manager's config file (default: the
	// built-in config).
	VGPUConfig []byte
	// Resync is the node daemons' safety-net period (default 1s).
	Resync time.Duration
	// OnStart, when set, is called just before an operand starts (or
	// restarts), with nothing else of the node moving meanwhile: a test
	// looks at the host as the operand finds it.
	OnStart func(operand string)
	// DataCentreDriver builds a fixture with vGPU-capable GPUs on NVIDIA's
	// data-centre driver (hostsim.DataCentreDriver); the vgpu-manager
	// operand then changes drivers (drivers.go).
	DataCentreDriver bool
	// Discovery runs the GPU discovery agent (which the product runs on
	// every node) with the node's resync: it labels the Node's GPUs and
	// their driver.
	Discovery bool
}

// Agent plays one node; Run follows its labels.
type Agent struct {
	o       Options
	k       *hostsim.Kernel
	h       *host.Host
	kubelet *Kubelet
	sockDir string
	wake    chan struct{}

	mu   sync.Mutex // held by each pass of Run and by Kill
	ctx  context.Context
	ops  map[string]*operand
	pods map[string]bool // the Ready each operand's pod shows
	pids int             // the last pid given to a stand-in process

	reports sync.Mutex
	valid   *validator.Validator
	vgpu    *wire.VGPUReady
}

// operand is a running operand.
type operand struct {
	cancel context.CancelFunc
	done   chan struct{}
	ready  func() bool
	// keep are files a killed process leaves as they are (its ready file):
	// Kill puts back what its in-process shutdown removed.
	keep []string
}

// New builds the node's simulated host and its stand-in kubelet.
func New(o Options) (*Agent, error) {
	if o.Resync <= 0 {
		o.Resync = time.Second
	}
	a := &Agent{o: o, ops: map[string]*operand{}, pods: map[string]bool{}, wake: make(chan struct{}, 1)}
	dirs := []string{"host", "vgpu-config"}
	for _, w := range names.Writers() {
		dirs = append(dirs, filepath.Join("run", w)) // the kubelet creates each hostPath
	}
	for _, d := range dirs {
		if err := os.MkdirAll(a.path(d), 0o755); err != nil {
			return nil, fmt.Errorf("node %s: %w", o.Node, err)
		}
	}
	if o.Fixture != "" {
		fx, err := hostsim.Lookup(o.Fixture)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", o.Node, err)
		}
		var opts []hostsim.Option
		if o.DataCentreDriver {
			opts = append(opts, hostsim.DataCentreDriver())
		}
		if a.k, err = fx.Build(a.path("host"), opts...); err != nil {
			return nil, fmt.Errorf("node %s: simulated host %s: %w", o.Node, o.Fixture, err)
		}
		a.h = host.New(a.k.Options())
	}
	// Unix socket paths are short: the device plugin and PodResources
	// sockets live in a short folder of their own.
	var err error
	if a.sockDir, err = os.MkdirTemp("", "agent"); err != nil {
		return nil, fmt.Errorf("node %s: socket folder: %w", o.Node, err)
	}
	if err := os.MkdirAll(filepath.Join(a.sockDir, "dp"), 0o755); err != nil {
		return nil, fmt.Errorf("node %s: %w", o.Node, err)
	}
	if a.kubelet, err = startKubelet(a.sockDir); err != nil {
		return nil, fmt.Errorf("node %s: %w", o.Node, err)
	}
	return a, nil
}

func (a *Agent) path(p ...string) string { return filepath.Join(append([]string{a.o.Dir}, p...)...) }

// Kernel is the node's simulated kernel (nil without a fixture).
func (a *Agent) Kernel() *hostsim.Kernel { return a.k }

// Host is the node's host model over the simulated kernel.
func (a *Agent) Host() *host.Host { return a.h }

// Kubelet is the node's stand-in PodResources API.
func (a *Agent) Kubelet() *Kubelet { return a.kubelet }

// RunDir is the node's /run/sandbox-gpu.
func (a *Agent) RunDir() string { return a.path("run") }

// WriterDir is a writer's own folder in RunDir (names.WriterDir).
func (a *Agent) WriterDir(writer string) string { return filepath.Join(a.RunDir(), writer) }

// RunPath is a shared file's path in RunDir (names.RunPath).
func (a *Agent) RunPath(file string) string { return names.RunPathIn(a.RunDir(), file) }

// Running lists the operands running now, sorted.
func (a *Agent) Running() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.ops))
}

// Run follows the Node's labels until ctx ends, then stops every operand
// (gracefully) and the stand-in kubelet.
func (a *Agent) Run(ctx context.Context) {
	lw := cache.NewListWatchFromClient(a.o.Client.CoreV1().RESTClient(), "nodes", metav1.NamespaceAll,
		fields.OneTermEqualSelector("metadata.name", a.o.Node))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	poke := func(any) {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }})
	go inf.Run(ctx.Done())
	if a.o.Discovery && a.h != nil {
		d, err := discovery.New(discovery.Options{NodeName: a.o.Node, Client: a.o.Client, Host: a.h, Resync: a.o.Resync,
			Log: a.o.Log.WithValues("node", a.o.Node, "operand", names.GPUDiscovery)})
		if err != nil {
			a.o.Log.Error(err, "GPU discovery not started", "node", a.o.Node)
		} else {
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = d.Run(ctx)
			}()
			defer func() { <-done }()
		}
	}
	a.mu.Lock()
	a.ctx = ctx
	a.mu.Unlock()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	defer a.shutdown()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
		case <-tick.C:
		}
		obj, ok, err := inf.GetStore().GetByKey(a.o.Node)
		if err != nil || !ok {
			continue
		}
		a.pass(ctx, obj.(*corev1.Node))
	}
}

// wanted lists the operands the Node's labels select: deploy labels name
// operands, release labels their release (vfio-manager-release).
func wanted(n *corev1.Node) map[string]bool {
	out := map[string]bool{}
	for l, v := range n.Labels {
		if v != "true" {
			continue
		}
		if op, ok := strings.CutPrefix(l, names.DeployPrefix); ok {
			out[op] = true
		}
		if op, ok := strings.CutPrefix(l, names.ReleasePrefix); ok {
			out[names.ReleaseOperand(op)] = true
		}
	}
	return out
}

// pass starts and stops operands as the labels say and brings each pod's
// readiness in line with its operand's.
func (a *Agent) pass(ctx context.Context, n *corev1.Node) {
	a.mu.Lock()
	defer a.mu.Unlock()
	want := wanted(n)
	for name, op := range a.ops {
		if !want[name] {
			op.cancel()
			<-op.done
			delete(a.ops, name)
			a.deletePod(ctx, name)
		}
	}
	for name := range want {
		if _, ok := a.ops[name]; ok {
			continue
		}
		if a.o.OnStart != nil {
			a.o.OnStart(name)
		}
		op, err := a.start(ctx, name)
		if err != nil {
			a.o.Log.Error(err, "Operand failed to start", "node", a.o.Node, "operand", name)
			op = &operand{cancel: func() {}, done: closed(), ready: func() bool { return false }}
		}
		a.ops[name] = op
	}
	a.hostDriver(ctx)
	for name, op := range a.ops {
		r := op.ready()
		if was, ok := a.pods[name]; ok && was == r {
			continue
		}
		if err := a.setPod(ctx, name, r); err != nil {
			if ctx.Err() == nil {
				a.o.Log.Error(err, "Operand pod status update failed", "node", a.o.Node, "operand", name)
			}
			continue
		}
		a.pods[name] = r
	}
}

func closed() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Kill stops a running operand as kill -9 would: nothing of its shutdown
// runs (its ready file stays as it was: readers judge it by its
// heartbeat), its pod turns not ready, and the kubelet restarts it on the
// next pass.
func (a *Agent) Kill(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	op, ok := a.ops[name]
	if !ok {
		return fmt.Errorf("node %s: operand %s is not running", a.o.Node, name)
	}
	left := map[string][]byte{}
	for _, f := range op.keep {
		if b, err := os.ReadFile(f); err == nil {
			left[f] = b
		}
	}
	op.cancel()
	<-op.done
	for f, b := range left {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return fmt.Errorf("node %s: leave %s as a killed %s would: %w", a.o.Node, f, name, err)
		}
	}
	delete(a.ops, name)
	if err := a.setPod(a.ctx, name, false); err != nil {
		return err
	}
	a.pods[name] = false
	return nil
}

func (a *Agent) shutdown() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, op := range a.ops {
		op.cancel()
		<-op.done
		delete(a.ops, name)
	}
	if err := a.kubelet.Stop(); err != nil {
		a.o.Log.Error(err, "Stand-in kubelet failed", "node", a.o.Node)
	}
	_ = os.RemoveAll(a.sockDir)
}

func (a *Agent) podName(op string) string { return operands.DaemonSetName(op) + "-" + a.o.Node }

// setPod gives the operand's DaemonSet pod on this node its readiness, as
// the kubelet does from the operand's readiness probe (creating the pod,
// as the DaemonSet controller does, when it is not there).
func (a *Agent) setPod(ctx context.Context, op string, ready bool) error {
	pods := a.o.Client.CoreV1().Pods(a.o.Namespace)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: a.podName(op), Namespace: a.o.Namespace,
		Labels: map[string]string{names.OperandLabel: op}},
		Spec: corev1.PodSpec{NodeName: a.o.Node, Containers: []corev1.Container{{Name: op, Image: "in-process"}}}}
	created, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = pods.Get(ctx, p.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", a.o.Namespace, p.Name, err)
	}
	created.Status.Phase = corev1.PodRunning
	cond := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}
	if !ready {
		cond.Status, cond.Reason, cond.Message = corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: ["+op+"]"
	}
	created.Status.Conditions = []corev1.PodCondition{cond}
	if _, err = pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s/%s: status: %w", a.o.Namespace, p.Name, err)
	}
	return nil
}

// deletePod removes the operand's pod (the DaemonSet no longer selects
// the node).
func (a *Agent) deletePod(ctx context.Context, op string) {
	zero := int64(0)
	err := a.o.Client.CoreV1().Pods(a.o.Namespace).Delete(ctx, a.podName(op), metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		a.o.Log.Error(err, "Operand pod deletion failed", "node", a.o.Node, "operand", op)
	}
	delete(a.pods, op)
}

// advertise is the kubelet's node status update for a resource.
func (a *Agent) advertise(resource string, healthy int) {
	q := fmt.Sprint(healthy)
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"capacity": map[string]string{resource: q}, "allocatable": map[string]string{resource: q}}})
	_, err := a.o.Client.CoreV1().Nodes().Patch(context.Background(), a.o.Node, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		a.o.Log.Error(err, "Node status update failed", "node", a.o.Node, "resource", resource)
	}
}

// Allocatable lists a Node's allocatable nvidia.com/ resources that are
// not zero, as name=count, sorted.
func Allocatable(n *corev1.Node) []string {
	var out []string
	for r, q := range n.Status.Allocatable {
		if strings.HasPrefix(string(r), "nvidia.com/") && !q.IsZero() {
			out = append(out, fmt.Sprintf("%s=%s", r, q.String()))
		}
	}
	sort.Strings(out)
	return out
}
