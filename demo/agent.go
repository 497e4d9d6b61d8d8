package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/kubevirt"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
	"github.com/sandbox-gpu/sandbox-gpu/validator"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// agent plays one node: the DaemonSet controller and kubelet that would
// start the operands its deploy labels select, running the real operand
// code in process against a simulated host, and keeping each operand's pod
// Ready while the operand itself says so (the pod appears once it first
// is).
type agent struct {
	node, ns string
	cs       kubernetes.Interface
	k        *hostsim.Kernel // nil without a GPU
	h        *host.Host
	dir      string
	log      logr.Logger

	started  map[string]func() bool // operand -> its readiness
	podReady map[string]bool        // operand -> the Ready its pod shows
	kubelet  *kubelet

	mu        sync.Mutex
	validator *validator.Validator
	vgpu      *vgpu.ReadyReport // the vGPU device manager's last pass
}

func newAgent(node, fixture, dir, ns string, cs kubernetes.Interface, log logr.Logger) (*agent, error) {
	a := &agent{node: node, ns: ns, cs: cs, dir: dir, log: log.WithValues("node", node),
		started: map[string]func() bool{}, podReady: map[string]bool{}}
	if err := os.MkdirAll(filepath.Join(dir, "host"), 0o755); err != nil {
		return nil, err
	}
	if fixture != "" {
		fx, err := hostsim.Lookup(fixture)
		if err != nil {
			return nil, err
		}
		k, err := fx.Build(filepath.Join(dir, "host"))
		if err != nil {
			return nil, fmt.Errorf("node %s: simulated host %s: %w", node, fixture, err)
		}
		a.k, a.h = k, host.New(k.Options())
	}
	for _, d := range []string{"run", "dp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func (a *agent) path(p ...string) string { return filepath.Join(append([]string{a.dir}, p...)...) }

// run follows the Node's deploy labels until ctx ends.
func (a *agent) run(ctx context.Context) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if a.kubelet != nil {
				a.kubelet.stop()
			}
			return
		case <-tick.C:
		}
		n, err := a.cs.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for l, v := range n.Labels {
			op, ok := strings.CutPrefix(l, names.DeployPrefix)
			if !ok || v != "true" {
				continue
			}
			if _, ok := a.started[op]; !ok {
				ready, err := a.start(ctx, op)
				if err != nil {
					a.log.Error(err, "Operand failed to start", "operand", op)
					ready = func() bool { return false }
				}
				a.started[op] = ready
			}
		}
		for op, ready := range a.started {
			r := ready()
			if was, ok := a.podReady[op]; (!ok && !r) || (ok && was == r) {
				continue
			}
			if err := a.setPod(ctx, op, r); err != nil {
				a.log.Error(err, "Operand pod status update failed", "operand", op)
				continue
			}
			a.podReady[op] = r
		}
	}
}

// start runs an operand's real code; the returned func says when it is ready.
func (a *agent) start(ctx context.Context, op string) (func() bool, error) {
	log := a.log.WithValues("operand", op)
	switch op {
	case names.VFIOManager:
		if a.h == nil {
			return nil, fmt.Errorf("no simulated host")
		}
		d, err := vfio.NewDaemon(vfio.DaemonOptions{Host: a.h, Desired: vfio.Desired{All: true, NVSwitches: true},
			ReadyDir: a.path("run"), Resync: time.Minute, Log: log})
		if err != nil {
			return nil, err
		}
		go func() { _ = d.Run(ctx) }()
		return func() bool { return vfio.IsReady(a.path("run", names.VFIOReadyFile)) }, nil
	case names.KubeVirtDevicePlugin:
		if a.h == nil {
			return nil, fmt.Errorf("no simulated host")
		}
		k, err := startKubelet(ctx, a.path("dp"), a.advertise)
		if err != nil {
			return nil, err
		}
		a.kubelet = k
		namer, err := kubevirt.NewNamer("", "")
		if err != nil {
			return nil, err
		}
		s := &kubevirt.Scanner{Host: a.h, Namer: namer, VGPU: kubevirt.VGPUState{
			PauseFile: a.path("run", names.VGPUPauseFile), ReadyFile: a.path("run", names.VGPUReadyFile)}}
		permitted := a.path("run", names.PermittedFile)
		m, err := deviceplugin.NewManager(deviceplugin.Options{Dir: a.path("dp"), SocketPrefix: "sandbox-gpu-kubevirt",
			Scanner: s, Ready: func() bool { return vfio.IsReady(a.path("run", names.VFIOReadyFile)) },
			WatchPaths: append(a.h.DeviceWatchPaths(), a.path("run")),
			OnScan: func(res []deviceplugin.Resource) error {
				return kubevirt.WritePermitted(permitted, s.PermittedFor(res))
			}, Log: log})
		if err != nil {
			return nil, err
		}
		go func() { _ = m.Run(ctx) }()
		// Ready once serving with its devices on the Node; it stays so
		// while the vGPU device manager pauses it.
		var served atomic.Bool
		return func() bool {
			if !served.Load() && len(m.Resources()) > 0 && a.advertised(ctx) {
				served.Store(true)
			}
			return served.Load()
		}, nil
	case names.VGPUDeviceManager:
		return a.startVGPU(ctx, log)
	case names.Validator:
		v, err := validator.New(validator.Options{NodeName: a.node, Client: a.cs, VFIOReadyFile: a.path("run", names.VFIOReadyFile),
			PermittedFile: a.path("run", names.PermittedFile), VGPUReadyFile: a.path("run", names.VGPUReadyFile),
			Resync: time.Second, Log: log})
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		a.validator = v
		a.mu.Unlock()
		go func() { _ = v.Run(ctx) }()
		return func() bool { return v.Report().Ready }, nil
	default:
		// No container runtime here: the NRI plugin (and anything else the
		// demo does not run) is taken as ready.
		return func() bool { return true }, nil
	}
}

// advertise is the kubelet's node status update for a resource.
func (a *agent) advertise(resource string, healthy int) {
	q := fmt.Sprint(healthy)
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{
		"capacity": map[string]string{resource: q}, "allocatable": map[string]string{resource: q}}})
	_, err := a.cs.CoreV1().Nodes().Patch(context.Background(), a.node, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		a.log.Error(err, "Node status update failed", "resource", resource)
	}
}

// advertised reports whether the Node shows an NVIDIA resource.
func (a *agent) advertised(ctx context.Context) bool {
	n, err := a.cs.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{})
	return err == nil && len(gpuResources(n)) > 0
}

// setPod gives the operand's DaemonSet pod on this node its readiness, as
// the kubelet does from the operand's readiness probe.
func (a *agent) setPod(ctx context.Context, op string, ready bool) error {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: operands.DaemonSetName(op) + "-" + a.node, Namespace: a.ns,
		Labels: map[string]string{names.OperandLabel: op}},
		Spec: corev1.PodSpec{NodeName: a.node, Containers: []corev1.Container{{Name: op, Image: "in-process"}}}}
	created, err := a.cs.CoreV1().Pods(a.ns).Create(ctx, p, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = a.cs.CoreV1().Pods(a.ns).Get(ctx, p.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", a.ns, p.Name, err)
	}
	created.Status.Phase = corev1.PodRunning
	cond := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	if !ready {
		cond.Status, cond.Reason, cond.Message = corev1.ConditionFalse, "ContainersNotReady", "containers with unready status: ["+op+"]"
	}
	created.Status.Conditions = []corev1.PodCondition{cond}
	if _, err = a.cs.CoreV1().Pods(a.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s/%s: status: %w", a.ns, p.Name, err)
	}
	return nil
}

// gpuResources lists a Node's allocatable nvidia.com/ resources as name=count.
func gpuResources(n *corev1.Node) []string {
	var out []string
	for r, q := range n.Status.Allocatable {
		if strings.HasPrefix(string(r), "nvidia.com/") && !q.IsZero() {
			out = append(out, fmt.Sprintf("%s=%s", r, q.String()))
		}
	}
	sort.Strings(out)
	return out
}
