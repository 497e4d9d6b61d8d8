package controllers

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// annotateVMGPUs sets (or, with "", removes) the Node's split as an admin
// would with kubectl annotate.
func annotateVMGPUs(t *testing.T, c client.Client, node, value string) {
	t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{names.VMGPUsAnnotation: v}}})
	require.NoError(t, err)
	require.NoError(t, c.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, raw)))
}

// splitReport waits until the VFIO manager's report on the Node satisfies
// cond.
func (n *simNode) splitReport(t *testing.T, what string, cond func(wire.SplitReport) bool) wire.SplitReport {
	t.Helper()
	var s wire.SplitReport
	testutil.Eventually(t, agentWait, "node "+n.name+": split report: "+what, func() bool {
		v, ok := getNode(t, n.c, n.name).Annotations[names.VMGPUsReportAnnotation]
		if !ok {
			return false
		}
		var err error
		s, err = wire.ParseSplitReport(v)
		return err == nil && cond(s)
	})
	return s
}

// onDriver lists the node's GPUs (not NVSwitches) on a vfio driver and on
// their host driver, by address.
func (n *simNode) gpuSides(t *testing.T) (vfio, hostDriver []host.Address) {
	t.Helper()
	for a, d := range n.drivers(t) {
		f, err := n.a.Host().ReadFunction(a)
		require.NoError(t, err)
		if f.Role != host.RoleGPU {
			continue
		}
		if host.IsVFIODriver(d) {
			vfio = append(vfio, a)
		} else {
			require.Equal(t, n.a.Kernel().NativeDriver(a), d, "%s: on vfio or on its host driver", a)
			hostDriver = append(hostDriver, a)
		}
	}
	slices.Sort(vfio)
	slices.Sort(hostDriver)
	return vfio, hostDriver
}

// hostGPUs counts the GPUs on their host driver in a start's record.
func hostGPUs(n *simNode, drivers map[host.Address]string) int {
	onHost := 0
	for a, d := range drivers {
		if f, err := n.a.Host().ReadFunction(a); err == nil && f.Role == host.RoleGPU && !host.IsVFIODriver(d) {
			onHost++
		}
	}
	return onHost
}

func addrs(ss []string) []host.Address {
	out := make([]host.Address, 0, len(ss))
	for _, s := range ss {
		out = append(out, host.Address(s))
	}
	slices.Sort(out)
	return out
}

// TestMixedNodeServesVMsAndContainers: an HGX H100 node (8 GPUs on two
// NUMA nodes) labelled vm-passthrough and annotated vm-gpus=4 is a mixed
// node. The VFIO manager (following the annotation, as --vm-gpus-from-node
// does) moves four GPUs, all in NUMA node 1, to vfio and keeps four on
// nvidia; the KubeVirt device plugin advertises four; the operator runs the
// container operands too (the NRI plugin, NVIDIA's device plugin) and the
// node is ready. A VM pod is allocated one VM GPU by the kubelet while
// containers keep the nvidia GPUs. vm-gpus=2 moves two idle GPUs back and
// keeps the allocated one, and the operator restarts NVIDIA's device plugin
// to serve the two GPUs that joined the container GPUs; vm-gpus=6 moves four container GPUs that NVIDIA's
// device plugin holds open: the operator stops it while the VFIO manager is
// not ready and starts it again once they moved; vm-gpus=0 returns the
// idle ones (NVIDIA's device plugin keeps serving containers, restarted
// for the GPUs that joined), reports
// the allocated one as left (the node configuring, the GPU untouched) until
// the kubelet frees it, then every GPU is on nvidia. Removing the annotation makes it a plain
// vm-passthrough node again, without the container operands.
func TestMixedNodeServesVMsAndContainers(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	setPolicy(t, c, sandboxOn("container"), sandboxOnAll)
	n := startSimNode(t, c, "mixed-hgx", "hgx-h100", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	annotateVMGPUs(t, c, n.name, "4") // declared before the operator sets the node up
	startOperator(t, newClock())
	const res = "nvidia.com/GH100_H100_SXM5_80GB"

	s := n.splitReport(t, "four VM GPUs", func(s wire.SplitReport) bool { return s.Declared == "4" && s.Ready })
	n.waitReady(t, v1alpha1.WorkloadVMPassthrough)
	n.waitAllocatable(t, res+"=4")
	vm, ctr := n.gpuSides(t)
	require.Len(t, vm, 4)
	require.Len(t, ctr, 4, "the container GPUs stay on nvidia")
	assert.Equal(t, vm, addrs(s.VM), "the report names the VM GPUs")
	assert.Equal(t, ctr, addrs(s.Container), "and the container GPUs")
	for _, a := range vm {
		f, err := n.a.Host().ReadFunction(a)
		require.NoError(t, err)
		assert.Equal(t, 1, f.NUMANode, "%s: the VM GPUs fill NUMA node 1", a)
	}
	wantOps := []string{names.KubeVirtDevicePlugin, names.NRIPlugin, names.NVIDIADevicePlugin, names.Validator, names.VFIOManager}
	testutil.Eventually(t, agentWait, "the container operands run beside the VM ones", func() bool {
		l := deployLabels(getNode(t, c, n.name))
		slices.Sort(l)
		return slices.Equal(l, wantOps) && slices.Equal(n.a.Running(), wantOps)
	})

	// NVIDIA's device plugin started once the split was made: it found the
	// four container GPUs on nvidia, the VM ones on vfio.
	for _, st := range n.startsSince(0) {
		if st.operand != names.NVIDIADevicePlugin {
			continue
		}
		onVFIO := 0
		for a, d := range st.drivers {
			if f, err := n.a.Host().ReadFunction(a); err == nil && f.Role == host.RoleGPU && host.IsVFIODriver(d) {
				onVFIO++
			}
		}
		assert.Equal(t, 4, onVFIO, "NVIDIA's device plugin starts after the VFIO manager made the split")
	}
	assert.Contains(t, operandsOf(n.startsSince(0)), names.NVIDIADevicePlugin)

	// A VM and containers at once: the kubelet gave the VM pod one VM GPU.
	held := vm[len(vm)-1]
	pod := vmPod(t, c, n.name, "vm-mixed", res)
	n.a.Kubelet().Allocate("default", "vm-mixed", "compute", res, string(held))
	st := nodeState(c, n.name)
	require.NotNil(t, st)
	assert.Equal(t, v1alpha1.StateReady, st.Status.State)
	assert.EqualValues(t, 4, st.Status.BoundToVFIO)

	// Two: two idle GPUs go back, the allocated one stays on vfio.
	st = nodeState(c, n.name)
	require.NotNil(t, st)
	assert.Equal(t, addrs(s.Container), addrs(st.Status.ContainerGPUs), "the container GPUs NVIDIA's device plugin started with")
	mark := n.startCount()
	annotateVMGPUs(t, c, n.name, "2")
	s = n.splitReport(t, "two VM GPUs", func(s wire.SplitReport) bool { return s.Declared == "2" && s.Ready })
	n.waitAllocatable(t, res+"=2")
	vm2, ctr2 := n.gpuSides(t)
	assert.Len(t, vm2, 2)
	assert.Len(t, ctr2, 6)
	assert.Contains(t, vm2, held, "the allocated GPU is kept")
	assert.Subset(t, vm, vm2, "no container GPU moved to vfio")
	assert.Equal(t, vm2, addrs(s.VM))
	// NVIDIA's device plugin finds GPUs only at its start: the operator
	// restarts it to serve the two that joined the container GPUs.
	testutil.Eventually(t, agentWait, "NVIDIA's device plugin restarted with the six container GPUs", func() bool {
		for _, st := range n.startsSince(mark) {
			if st.operand == names.NVIDIADevicePlugin && hostGPUs(n, st.drivers) == 6 {
				return true
			}
		}
		return false
	})
	st = n.waitFor(t, "the new container GPUs recorded", func(s *v1alpha1.SandboxGPUNode) bool {
		return len(s.Status.ContainerGPUs) == 6 && s.Status.State == v1alpha1.StateReady
	})
	assert.Equal(t, ctr2, addrs(st.Status.ContainerGPUs))
	testutil.Eventually(t, agentWait, "the container operands run again after the restart", func() bool {
		return slices.Equal(n.a.Running(), wantOps)
	})

	// Six, while NVIDIA's device plugin holds the six container GPUs open
	// (NVML): the VFIO manager cannot move four of them, is not ready, and
	// the operator stops the device plugin until they moved; it then starts
	// again with the two container GPUs left.
	mark = n.startCount()
	annotateVMGPUs(t, c, n.name, "6")
	s = n.splitReport(t, "six VM GPUs", func(s wire.SplitReport) bool { return s.Declared == "6" && s.Ready && len(s.VM) == 6 })
	n.waitAllocatable(t, res+"=6")
	n.waitReady(t, v1alpha1.WorkloadVMPassthrough)
	vm6, ctr6 := n.gpuSides(t)
	assert.Len(t, vm6, 6)
	assert.Len(t, ctr6, 2)
	assert.Contains(t, vm6, held)
	restarted := false
	for _, st := range n.startsSince(mark) {
		if st.operand != names.NVIDIADevicePlugin {
			continue
		}
		restarted = true
		assert.Equal(t, 2, hostGPUs(n, st.drivers), "NVIDIA's device plugin restarts with the container GPUs of the new split")
	}
	assert.True(t, restarted, "NVIDIA's device plugin was stopped for the move and started again")
	testutil.Eventually(t, agentWait, "the container operands run again", func() bool {
		return slices.Equal(deployLabels(getNode(t, c, n.name)), wantOps) && slices.Equal(n.a.Running(), wantOps)
	})

	// None: the idle ones go back; the allocated one cannot, and is
	// reported until the kubelet frees it. NVIDIA's device plugin keeps
	// running meanwhile (the VFIO manager waits only for a GPU going to
	// containers, which the plugin cannot hold): it restarts with the seven
	// container GPUs on nvidia, and again with eight once the last is back.
	mark = n.startCount()
	annotateVMGPUs(t, c, n.name, "0")
	s = n.splitReport(t, "the allocated GPU left", func(s wire.SplitReport) bool {
		return s.Declared == "0" && !s.Ready && slices.Contains(s.Left, string(held))
	})
	assert.Equal(t, []string{string(held)}, s.Left, "only the held GPU is left")
	assert.Contains(t, s.Reason, string(held))
	st = n.waitFor(t, "configuring while a GPU is left", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.State == v1alpha1.StateConfiguring && strings.Contains(s.Status.Message, names.VFIOManager)
	})
	assert.Equal(t, v1alpha1.WorkloadVMPassthrough, st.Status.AppliedConfig)
	vm0, _ := n.gpuSides(t)
	assert.Equal(t, []host.Address{held}, vm0, "the allocated GPU stays on vfio")
	dpStartedWith := func(what string, gpus int) {
		t.Helper()
		testutil.Eventually(t, agentWait, what, func() bool {
			for _, st := range n.startsSince(mark) {
				if st.operand == names.NVIDIADevicePlugin && hostGPUs(n, st.drivers) == gpus {
					return slices.Contains(n.a.Running(), names.NVIDIADevicePlugin)
				}
			}
			return false
		})
	}
	dpStartedWith("NVIDIA's device plugin runs with the seven container GPUs while the held one waits", 7)
	st = nodeState(c, n.name)
	require.NotNil(t, st)
	assert.Len(t, st.Status.ContainerGPUs, 7)
	assert.NotContains(t, st.Status.ContainerGPUs, string(held))
	deletePod(t, c, pod)
	n.a.Kubelet().Free("default", "vm-mixed")
	n.splitReport(t, "every GPU on containers", func(s wire.SplitReport) bool { return s.Declared == "0" && s.Ready && len(s.VM) == 0 })
	vm0, ctr0 := n.gpuSides(t)
	assert.Empty(t, vm0)
	assert.Len(t, ctr0, 8)
	dpStartedWith("NVIDIA's device plugin restarts with all eight", 8)

	// No split: a plain vm-passthrough node, every GPU on vfio, no
	// container operand.
	annotateVMGPUs(t, c, n.name, "")
	n.splitReport(t, "every GPU", func(s wire.SplitReport) bool { return s.Declared == "" && s.Ready && len(s.VM) == 8 })
	n.waitAllocatable(t, res+"=8")
	vmOps := []string{names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager}
	testutil.Eventually(t, agentWait, "the container operands go", func() bool {
		l := deployLabels(getNode(t, c, n.name))
		slices.Sort(l)
		return slices.Equal(l, vmOps) && slices.Equal(n.a.Running(), vmOps)
	})
	n.waitReady(t, v1alpha1.WorkloadVMPassthrough)
}

// Without sandbox workloads the product runs no node operand on a GPU node
// (the discovery agent runs by no deploy label): whatever its label, it is
// a container node that NVIDIA's container stack serves, ready at once;
// annotated as a mixed node it runs nothing either.
func TestSandboxOffRunsNoNodeOperand(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	setPolicy(t, c, v1alpha1.SandboxWorkloads{})
	startOperator(t, newClock())
	newNode(t, c, "off-ctr", map[string]string{names.WorkloadConfigLabel: "container"})
	newNode(t, c, "off-vm", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	annotateVMGPUs(t, c, "off-vm", "2")
	for _, n := range []string{"off-ctr", "off-vm"} {
		st := waitState(t, c, n, "ready with container", func(s *v1alpha1.SandboxGPUNode) bool {
			return s.Status.State == v1alpha1.StateReady && s.Status.AppliedConfig == v1alpha1.WorkloadContainer
		})
		assert.Empty(t, deployLabels(getNode(t, c, n)), "%s: no operand (%s)", n, st.Status.Message)
	}
	// Turned on, the container node gets the container operands.
	setPolicy(t, c, sandboxOn("container"))
	testutil.Eventually(t, wait, "the container operands", func() bool {
		return slices.Equal(deployLabels(getNode(t, c, "off-ctr")), containerOps)
	})
}
