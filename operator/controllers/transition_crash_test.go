package controllers

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/agenttest"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// errKilled is every write of an operator killed by writeCrash.
var errKilled = errors.New("operator killed (simulated kill -9)")

// writeCrash lets an operator make n writes (creates, updates, patches,
// deletes, of objects and subresources) and fails every later one, as if
// it had been killed right after the n-th: crashed closes then.
type writeCrash struct {
	after   int
	mu      sync.Mutex
	writes  int
	once    sync.Once
	crashed chan struct{}
}

func newWriteCrash(after int) *writeCrash {
	return &writeCrash{after: after, crashed: make(chan struct{})}
}

func (w *writeCrash) write() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.after > 0 && w.writes >= w.after {
		w.once.Do(func() { close(w.crashed) })
		return errKilled
	}
	w.writes++
	return nil
}

func (w *writeCrash) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

func (w *writeCrash) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := w.write(); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := w.write(); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := w.write(); err != nil {
				return err
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := w.write(); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := w.write(); err != nil {
				return err
			}
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := w.write(); err != nil {
				return err
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if err := w.write(); err != nil {
				return err
			}
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
	}
}

// converged checks a node that switched to container: ready, every GPU on
// its host driver, no release label or report left, no violation.
func (n *simNode) convergedContainer(t *testing.T, what string) {
	t.Helper()
	n.waitReady(t, v1alpha1.WorkloadContainer)
	n.waitAllocatable(t)
	for a, d := range n.drivers(t) {
		assert.Equal(t, n.a.Kernel().NativeDriver(a), d, "%s: %s", what, a)
	}
	vgpus, vfs := n.vgpuCounts(t)
	assert.Zero(t, vgpus+vfs, what)
	node := getNode(t, n.c, n.name)
	assert.Empty(t, releaseLabels(node), what)
	assert.Equal(t, containerOps, deployLabels(node), what)
	assert.Empty(t, n.a.Kernel().Violations(), what)
}

// TestOperatorKilledAtEveryWrite: a node leaves vm-passthrough for
// container while the operator is killed right after its n-th write (a
// label switch without its status, a status without its label switch, a
// finalizer, a policy status), for every n the transition makes; a new
// operator then takes over. Every time the node converges: ready with
// container, its GPU back on nvidia, nothing stranded.
func TestOperatorKilledAtEveryWrite(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	setPolicy(t, c, sandboxOn("container"), sandboxOnAll)
	clk := newClock()
	op := startOperatorWith(t, clk, operatorConfig{})
	n := startSimNode(t, c, "kill-op", "a10", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	for after := 1; ; after++ {
		n.waitReady(t, v1alpha1.WorkloadVMPassthrough)
		op.stop()
		crash := newWriteCrash(after)
		op = startOperatorWith(t, clk, operatorConfig{crash: crash})
		setNodeLabel(t, c, n.name, names.WorkloadConfigLabel, v1alpha1.WorkloadContainer)
		done := false
		testutil.Eventually(t, agentWait, "the crash or the switch", func() bool {
			select {
			case <-crash.crashed:
				return true
			default:
			}
			st := nodeState(c, n.name)
			done = st != nil && st.Status.State == v1alpha1.StateReady && st.Status.AppliedConfig == v1alpha1.WorkloadContainer
			return done
		})
		op.stop()
		op = startOperatorWith(t, clk, operatorConfig{})
		n.convergedContainer(t, "after a kill at write "+itoa(after))
		if done {
			t.Logf("the transition took %d writes; the operator was killed after each", crash.count())
			require.Greater(t, after, 3, "a transition makes several writes")
			return
		}
		setNodeLabel(t, c, n.name, names.WorkloadConfigLabel, v1alpha1.WorkloadVMPassthrough)
	}
}

// crashDaemon crashes the node's host after the n-th sysfs write from now,
// waits until a daemon ran into it (its report names the simulated
// crash), then kills the operand as kill -9 would and lets the host work
// again: the kubelet restarts the operand.
func (n *simNode) crashDaemon(t *testing.T, operand string, after int, crashed func() bool) {
	t.Helper()
	testutil.Eventually(t, agentWait, n.name+": "+operand+" ran into the crash at write "+itoa(after), crashed)
	k := n.a.Kernel()
	require.Len(t, k.Writes(), after, "the host took %d writes", after)
	k.CrashAfter(0)
	require.NoError(t, n.a.Kill(operand))
}

// vfioCrashed reports whether the VFIO manager's ready file (left by a
// killed one, too) names the simulated crash.
func (n *simNode) vfioCrashed() bool {
	r, err := wire.ReadVFIOReady(n.a.RunPath(names.VFIOReadyFile))
	return err == nil && strings.Contains(r.Reason+r.Error, hostsim.ErrCrashed.Error())
}

// TestNodeDaemonKilledAtEveryWrite: the node daemon doing a transition's
// host work is killed after each single sysfs write it makes (the
// simulated kernel crashes the write after, the daemon is stopped without
// its cleanup, its ready file left behind, and restarted): the VFIO
// manager's release leaving vm-passthrough, the VFIO manager binding on
// the way back, and the vGPU device manager's release leaving vm-vgpu
// (for container: the vGPU host driver, which the policy deploys, gives
// the GPUs back to the data-centre driver each time). Every time the node
// converges to the same final state, with no simulator violation.
func TestNodeDaemonKilledAtEveryWrite(t *testing.T) {
	c := startTest(t, newClock(), "container", sandboxOnAll, vgpuManagerOn)

	t.Run("vfio", func(t *testing.T) {
		n := startSimNode(t, c, "kill-vfio", "workstation", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
		for after := 1; ; after++ {
			n.waitReady(t, v1alpha1.WorkloadVMPassthrough)
			// Leaving: the release is killed after write n.
			n.a.Kernel().CrashAfter(after)
			setNodeLabel(t, c, n.name, names.WorkloadConfigLabel, v1alpha1.WorkloadContainer)
			st := n.waitFor(t, "released or crashed", func(s *v1alpha1.SandboxGPUNode) bool {
				return s.Status.AppliedConfig == v1alpha1.WorkloadContainer || n.vfioCrashed()
			})
			releasedClean := st.Status.AppliedConfig == v1alpha1.WorkloadContainer
			if !releasedClean {
				n.crashDaemon(t, names.ReleaseOperand(names.VFIOManager), after, n.vfioCrashed)
			}
			n.a.Kernel().CrashAfter(0)
			n.convergedContainer(t, "release killed after write "+itoa(after))

			// Coming back: the VFIO manager is killed after write n.
			n.a.Kernel().CrashAfter(after)
			setNodeLabel(t, c, n.name, names.WorkloadConfigLabel, v1alpha1.WorkloadVMPassthrough)
			boundClean := false
			testutil.Eventually(t, agentWait, "bound or crashed", func() bool {
				st := nodeState(c, n.name)
				boundClean = st != nil && st.Status.State == v1alpha1.StateReady && st.Status.AppliedConfig == v1alpha1.WorkloadVMPassthrough
				return boundClean || n.vfioCrashed()
			})
			if !boundClean {
				n.crashDaemon(t, names.VFIOManager, after, n.vfioCrashed)
			}
			n.a.Kernel().CrashAfter(0)
			n.waitReady(t, v1alpha1.WorkloadVMPassthrough)
			for a, d := range n.drivers(t) {
				assert.Equal(t, "vfio-pci", d, "bind killed after write %d: %s", after, a)
			}
			assert.Empty(t, n.a.Kernel().Violations())
			if releasedClean && boundClean {
				t.Logf("killed after each of %d writes", after-1)
				require.Greater(t, after, 3)
				return
			}
		}
	})

	t.Run("vgpu", func(t *testing.T) {
		n := startSimNode(t, c, "kill-vgpu", "l40s-vgpu", map[string]string{names.WorkloadConfigLabel: "vm-vgpu", names.VGPUConfigLabel: "L40S-24Q"},
			func(o *agenttest.Options) { o.DataCentreDriver, o.Discovery = true, true })
		report := func() string {
			return getNode(t, c, n.name).Annotations[names.ReleaseReportAnnotation(names.VGPUDeviceManager)]
		}
		for after := 1; ; after++ {
			n.waitReady(t, v1alpha1.WorkloadVMVGPU)
			n.a.Kernel().CrashAfter(after)
			setNodeLabel(t, c, n.name, names.WorkloadConfigLabel, v1alpha1.WorkloadContainer)
			crashed := func() bool { return strings.Contains(report(), hostsim.ErrCrashed.Error()) }
			st := n.waitFor(t, "released or crashed", func(s *v1alpha1.SandboxGPUNode) bool {
				return s.Status.AppliedConfig == v1alpha1.WorkloadContainer || crashed()
			})
			clean := st.Status.AppliedConfig == v1alpha1.WorkloadContainer
			if !clean {
				n.crashDaemon(t, names.ReleaseOperand(names.VGPUDeviceManager), after, crashed)
			}
			n.a.Kernel().CrashAfter(0)
			n.convergedContainer(t, "vGPU release killed after write "+itoa(after))
			if clean {
				t.Logf("killed after each of %d writes", after-1)
				require.Greater(t, after, 3)
				return
			}
			setNodeLabel(t, c, n.name, names.WorkloadConfigLabel, v1alpha1.WorkloadVMVGPU)
		}
	})
}

// TestNodeDaemonsKilledAtEachStep: every operand running on the node is
// killed (no cleanup, restarted by the kubelet) at each step of a
// transition from vm-passthrough to container: while draining (the VFIO
// manager must not move the GPU a VM pod holds), while releasing and
// while configuring. The node converges.
func TestNodeDaemonsKilledAtEachStep(t *testing.T) {
	c := startTest(t, newClock(), "container", sandboxOnAll)
	n := startSimNode(t, c, "kill-steps", "hgx-h100", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	n.waitReady(t, v1alpha1.WorkloadVMPassthrough)
	killAll := func(step string) {
		for _, op := range n.a.Running() {
			if err := n.a.Kill(op); err != nil {
				t.Logf("%s: %v", step, err) // it stopped by itself meanwhile
			}
		}
	}
	pod := vmPod(t, c, n.name, "vm-kill-steps", "nvidia.com/GH100_H100_SXM5_80GB")
	setNodeLabel(t, c, n.name, names.WorkloadConfigLabel, v1alpha1.WorkloadContainer)
	n.waitFor(t, "draining", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateDraining })
	killAll("draining")
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) { // the restarted VFIO manager holds the GPUs where they are
		for a, d := range n.drivers(t) {
			require.Equal(t, "vfio-pci", d, "draining: %s", a)
		}
		tick := time.NewTimer(100 * time.Millisecond)
		<-tick.C
	}
	assert.Equal(t, v1alpha1.StateDraining, nodeState(c, n.name).Status.State)
	deletePod(t, c, pod)
	n.waitFor(t, "releasing", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.State == v1alpha1.StateReleasing || s.Status.AppliedConfig == v1alpha1.WorkloadContainer
	})
	killAll("releasing")
	n.waitFor(t, "configuring", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == v1alpha1.WorkloadContainer })
	killAll("configuring")
	n.convergedContainer(t, "operands killed at each step")
}

func itoa(n int) string { return strconv.Itoa(n) }
