package controllers

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/agenttest"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// agentWait bounds each step of a test with the real node daemons: they
// run in process on simulated hosts, on a machine other tests share.
const agentWait = 90 * time.Second

// simNode is a GPU node played by the real node daemons on a simulated
// host (agenttest), as the demo runs them.
type simNode struct {
	name string
	a    *agenttest.Agent
	c    client.Client

	mu     sync.Mutex
	starts []operandStart // every operand start, with the host as it found it
}

// operandStart is an operand's start and the host's state at that moment.
type operandStart struct {
	operand string
	drivers map[host.Address]string // every NVIDIA function's driver
	vgpus   int                     // vGPUs on the host
	vfs     int                     // enabled SR-IOV VFs
	driver  string                  // the NVIDIA host driver (host.NVIDIADriver)
}

// startSimNode creates a GPU Node with labels and runs its agent on the
// fixture until the test ends; opts change the agent's options.
func startSimNode(t *testing.T, c client.Client, name, fixture string, labels map[string]string, opts ...func(*agenttest.Options)) *simNode {
	t.Helper()
	newNode(t, c, name, labels)
	cs, err := kubernetes.NewForConfig(testCfg)
	require.NoError(t, err)
	ensureNamespace(t, c, operandNS)
	n := &simNode{name: name, c: c}
	o := agenttest.Options{Node: name, Fixture: fixture, Dir: t.TempDir(), Namespace: operandNS, Client: cs,
		Log: logr.Discard(), OnStart: n.record}
	for _, f := range opts {
		f(&o)
	}
	a, err := agenttest.New(o)
	require.NoError(t, err)
	n.a = a
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		// The pods the agent kept, as a DaemonSet controller would delete
		// them with the node.
		var pods corev1.PodList
		if err := c.List(context.Background(), &pods, client.InNamespace(operandNS)); err == nil {
			for i := range pods.Items {
				if pods.Items[i].Spec.NodeName == name {
					_ = c.Delete(context.Background(), &pods.Items[i], client.GracePeriodSeconds(0))
				}
			}
		}
	})
	return n
}

// record notes the host as an operand finds it at its start.
func (n *simNode) record(operand string) {
	s := operandStart{operand: operand, drivers: map[host.Address]string{}}
	k := n.a.Kernel()
	if k != nil {
		for _, a := range k.Addresses() {
			if f, err := n.a.Host().ReadFunction(a); err == nil && f.Vendor == host.VendorNVIDIA && f.PhysFn == "" {
				s.drivers[a] = k.DriverOf(a)
			}
		}
		if gpus, err := vgpu.Inventory(n.a.Host(), nil); err == nil {
			for _, g := range gpus {
				s.vgpus += len(g.VGPUs)
				s.vfs += len(g.VFs)
			}
		}
		s.driver, _ = n.a.Host().NVIDIADriver()
	}
	n.mu.Lock()
	n.starts = append(n.starts, s)
	n.mu.Unlock()
}

// startsSince returns the operand starts recorded after the first i.
func (n *simNode) startsSince(i int) []operandStart {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]operandStart(nil), n.starts[i:]...)
}

func (n *simNode) startCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.starts)
}

// waitFor polls the node's state until cond holds.
func (n *simNode) waitFor(t *testing.T, what string, cond func(*v1alpha1.SandboxGPUNode) bool) *v1alpha1.SandboxGPUNode {
	t.Helper()
	var st *v1alpha1.SandboxGPUNode
	testutil.Eventually(t, agentWait, "node "+n.name+": "+what, func() bool {
		st = nodeState(n.c, n.name)
		return st != nil && cond(st)
	})
	return st
}

// waitReady waits until the node runs config with its operands ready.
func (n *simNode) waitReady(t *testing.T, config string) *v1alpha1.SandboxGPUNode {
	t.Helper()
	return n.waitFor(t, "ready with "+config, func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.State == v1alpha1.StateReady && s.Status.AppliedConfig == config && s.Status.WorkloadConfig == config
	})
}

// waitAllocatable waits until the Node's allocatable nvidia.com/ resources
// are exactly want (name=count, sorted).
func (n *simNode) waitAllocatable(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	ok := false
	deadline := time.Now().Add(agentWait)
	for time.Now().Before(deadline) {
		got = agenttest.Allocatable(getNode(t, n.c, n.name))
		if slices.Equal(got, want) {
			ok = true
			break
		}
		tick := time.NewTimer(100 * time.Millisecond)
		<-tick.C
	}
	if !ok {
		t.Fatalf("node %s: allocatable %v, want %v", n.name, got, want)
	}
}

// drivers maps the node's NVIDIA physical functions to their drivers.
func (n *simNode) drivers(t *testing.T) map[host.Address]string {
	t.Helper()
	out := map[host.Address]string{}
	for _, a := range n.a.Kernel().Addresses() {
		f, err := n.a.Host().ReadFunction(a)
		require.NoError(t, err)
		if f.Vendor == host.VendorNVIDIA && f.PhysFn == "" {
			out[a] = n.a.Kernel().DriverOf(a)
		}
	}
	return out
}

// vgpuCounts is the node's vGPUs and enabled VFs.
func (n *simNode) vgpuCounts(t *testing.T) (vgpus, vfs int) {
	t.Helper()
	gpus, err := vgpu.Inventory(n.a.Host(), nil)
	require.NoError(t, err)
	for _, g := range gpus {
		vgpus += len(g.VGPUs)
		vfs += len(g.VFs)
	}
	return vgpus, vfs
}

// holdVGPU makes a simulated QEMU (pid) hold the first vGPU's VFIO group
// and returns the vGPU's ID.
func (n *simNode) holdVGPU(t *testing.T, pid int) string {
	t.Helper()
	gpus, err := vgpu.Inventory(n.a.Host(), nil)
	require.NoError(t, err)
	for _, g := range gpus {
		if len(g.VGPUs) == 0 {
			continue
		}
		v := g.VGPUs[0]
		group := host.NoGroup
		if a, err := host.ParseAddress(v.ID); err == nil {
			f, err := n.a.Host().ReadFunction(a)
			require.NoError(t, err)
			group = f.IOMMUGroup
		} else {
			m, ok, err := n.a.Host().ReadMdev(v.ID)
			require.NoError(t, err)
			require.True(t, ok)
			group = m.IOMMUGroup
		}
		require.NoError(t, n.a.Kernel().HoldOpen(pid, "qemu-kvm", "vfio/"+strconv.Itoa(group)))
		return v.ID
	}
	t.Fatalf("node %s: no vGPU to hold", n.name)
	return ""
}

// holdGPU makes a simulated QEMU (pid) hold a passthrough GPU's VFIO group.
func (n *simNode) holdGPU(t *testing.T, pid int, a host.Address) {
	t.Helper()
	f, err := n.a.Host().ReadFunction(a)
	require.NoError(t, err)
	require.NoError(t, n.a.Kernel().HoldOpen(pid, "qemu-kvm", "vfio/"+strconv.Itoa(f.IOMMUGroup)))
}

// vmPod is a pod holding one of resource on the node (a VM, or a GPU
// container for nvidia.com/gpu).
func vmPod(t *testing.T, c client.Client, node, name, res string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "compute", Image: "virt-launcher",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}}}}}}
	require.NoError(t, c.Create(context.Background(), p))
	t.Cleanup(func() { _ = c.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	return p
}

func deletePod(t *testing.T, c client.Client, p *corev1.Pod) {
	t.Helper()
	require.NoError(t, c.Delete(context.Background(), p, client.GracePeriodSeconds(0)))
}

// operandsOf lists operand names in starts.
func operandsOf(starts []operandStart) []string {
	var out []string
	for _, s := range starts {
		out = append(out, s.operand)
	}
	return out
}

// sandboxOnAll is sandbox workloads in KubeVirt mode with every node free
// to change at once (tests of one node each, side by side).
func sandboxOnAll(s *v1alpha1.SandboxGPUPolicySpec) {
	all := intstr.FromString("100%")
	s.Transition.MaxUnavailable = &all
}
