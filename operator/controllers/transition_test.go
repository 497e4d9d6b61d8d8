package controllers

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/agenttest"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// matrixCell is one transition of the matrix: a node on fixture moves from
// one workload config to another.
type matrixCell struct {
	from, to, fixture string
	vgpuConfig        string   // the node's nvidia.com/vgpu.config
	fromRes, toRes    []string // allocatable before and after
	oldRes            string   // what a GPU pod of the old config holds
	// dataCentre: the host boots on NVIDIA's data-centre driver
	// (hostsim.DataCentreDriver); a vGPU fixture otherwise has the vGPU
	// host driver installed.
	dataCentre bool
}

var matrix = []matrixCell{
	{"container", "vm-passthrough", "a10", "", nil, []string{"nvidia.com/GA102GL_A10=1"}, "nvidia.com/gpu", true},
	{"vm-passthrough", "container", "a10", "", []string{"nvidia.com/GA102GL_A10=1"}, nil, "nvidia.com/GA102GL_A10", true},
	{"container", "vm-vgpu", "a10-vgpu", "A10-4Q", nil, []string{"nvidia.com/NVIDIA_A10-4Q=6"}, "nvidia.com/gpu", true},
	{"vm-vgpu", "container", "l40s-vgpu", "L40S-24Q", []string{"nvidia.com/NVIDIA_L40S-24Q=4"}, nil, "nvidia.com/NVIDIA_L40S-24Q", true},
	{"vm-passthrough", "vm-vgpu", "a10-vgpu", "A10-4Q", []string{"nvidia.com/GA102GL_A10=1"}, []string{"nvidia.com/NVIDIA_A10-4Q=6"}, "nvidia.com/GA102GL_A10", true},
	{"vm-vgpu", "vm-passthrough", "l40s-vgpu", "L40S-24Q", []string{"nvidia.com/NVIDIA_L40S-24Q=4"}, []string{"nvidia.com/AD102GL_L40S=2"}, "nvidia.com/NVIDIA_L40S-24Q", false},
}

// TestTransitionMatrix moves a node between every pair of container,
// vm-passthrough and vm-vgpu, each way (KubeVirt mode, the policy deploying
// the vGPU host driver: vgpuManager), with the real node daemons on
// simulated hosts (the VFIO manager and its release, the vGPU device
// manager and its release, the KubeVirt device plugin with a stand-in
// kubelet, the validator, the GPU discovery agent) and stand-ins for
// NVIDIA's drivers (agenttest's drivers.go). Per cell:
//   - drain per policy: a GPU pod of the old config keeps the node
//     draining (named in its message), the old operands running and no
//     operand of the new config started, until it goes;
//   - leaving vm-passthrough, every GPU is back on its host driver (the
//     simulated kernel's DriverOf) before any operand of the new config
//     starts; leaving vm-vgpu, no vGPU and no VF is left by then;
//   - vGPUs are removed only when unused: a QEMU still holding one after
//     its pod went keeps the node releasing, the reason in its message,
//     the vGPU untouched, until it exits;
//   - where the NVIDIA driver changes (container <-> vm-vgpu on a host that
//     boots on the data-centre driver, vm-passthrough -> vm-vgpu there), no
//     container operand starts before the data-centre driver serves the
//     GPUs and no vGPU device manager before the vGPU host driver does
//     (the kernel's modules as each start found them), a WaitingForDriver
//     event says so, and the node ends on the driver its config needs, as
//     its discovery label says;
//   - the node ends ready with the new config applied, the transition
//     recorded, the Releasing and Released events where a release ran, the
//     vGPU state label gone when it left vm-vgpu; the Node's allocatable
//     follows (old resources gone, new ones there); no write a real kernel
//     would have turned into lost work.
func TestTransitionMatrix(t *testing.T) {
	c := startTest(t, newClock(), "container", sandboxOnAll, vgpuManagerOn)
	for i, cell := range matrix {
		t.Run(cell.from+"-to-"+cell.to, func(t *testing.T) {
			t.Parallel()
			name := "mx-" + strings.ReplaceAll(cell.from+"-"+cell.to, "vm-", "")
			runCell(t, c, name, cell, 7000+10*i)
		})
	}
}

func runCell(t *testing.T, c client.Client, name string, cell matrixCell, pid int) {
	labels := map[string]string{names.WorkloadConfigLabel: cell.from}
	if cell.vgpuConfig != "" {
		labels[names.VGPUConfigLabel] = cell.vgpuConfig
	}
	n := startSimNode(t, c, name, cell.fixture, labels, func(o *agenttest.Options) {
		o.Discovery, o.DataCentreDriver = true, cell.dataCentre
	})
	n.waitReady(t, cell.from)
	n.waitAllocatable(t, cell.fromRes...)
	p := getPolicy(c)
	rel := workload.ReleaseOperand(cell.from, p)
	newOps := workload.Operands(cell.to, p)

	pod := vmPod(t, c, name, "vm-"+name, cell.oldRes)
	var held string
	if cell.from == v1alpha1.WorkloadVMVGPU {
		held = n.holdVGPU(t, pid)
	}
	need := workload.DriverNeeded(cell.to)
	before, err := n.a.Host().NVIDIADriver()
	require.NoError(t, err)
	mark := n.startCount()
	setNodeLabel(t, c, name, names.WorkloadConfigLabel, cell.to)
	st := n.waitFor(t, "draining", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateDraining })
	assert.Contains(t, st.Status.Message, "default/vm-"+name, "the drain names the GPU pod")
	for _, s := range n.startsSince(mark) {
		assert.NotContains(t, newOps, s.operand, "nothing of %s starts while draining", cell.to)
	}
	if rel != "" {
		assert.Contains(t, n.a.Running(), rel, "the old config's operand runs while draining")
	}
	deletePod(t, c, pod)

	if held != "" {
		st = n.waitFor(t, "the release refuses the held vGPU", func(s *v1alpha1.SandboxGPUNode) bool {
			return s.Status.State == v1alpha1.StateReleasing && strings.Contains(s.Status.Message, "qemu-kvm")
		})
		assert.Contains(t, st.Status.Message, "in use")
		assert.Equal(t, cell.from, st.Status.AppliedConfig)
		vgpus, _ := n.vgpuCounts(t)
		assert.NotZero(t, vgpus, "the held vGPU stays")
		waitEvent(t, c, name, EventReleaseRefused, 1)
		require.NoError(t, n.a.Kernel().Exit(pid))
	}

	st = n.waitReady(t, cell.to)
	n.waitAllocatable(t, cell.toRes...)
	require.NotNil(t, st.Status.Transition)
	assert.Equal(t, cell.from, st.Status.Transition.From)
	assert.Equal(t, cell.to, st.Status.Transition.To)
	assert.NotNil(t, st.Status.Transition.Completed)

	starts := n.startsSince(mark)
	ops := operandsOf(starts)
	first := len(ops)
	for i, s := range starts {
		if slices.Contains(newOps, s.operand) && i < first {
			first = i
		}
	}
	require.Less(t, first, len(ops), "the new config's operands started: %v", ops)
	if rel != "" {
		assert.Contains(t, ops[:first], names.ReleaseOperand(rel), "the release runs before the new operands: %v", ops)
		waitEvent(t, c, name, EventReleasing, 1)
		waitEvent(t, c, name, EventReleased, 1)
	} else {
		assert.NotContains(t, ops, names.ReleaseOperand(names.VFIOManager), "nothing to release")
		assert.NotContains(t, ops, names.ReleaseOperand(names.VGPUDeviceManager), "nothing to release")
	}
	for _, s := range starts[first:] {
		if !slices.Contains(newOps, s.operand) {
			continue
		}
		switch {
		case slices.Contains(containerOps, s.operand):
			assert.Equal(t, names.GPUDriverDataCentre, s.driver, "%s started before the data-centre driver served the GPUs", s.operand)
		case s.operand == names.VGPUDeviceManager:
			assert.Equal(t, names.GPUDriverVGPUHost, s.driver, "%s started before the vGPU host driver served the GPUs", s.operand)
		}
		switch cell.from {
		case v1alpha1.WorkloadVMPassthrough:
			for a, d := range s.drivers {
				assert.Equal(t, n.a.Kernel().NativeDriver(a), d, "%s found %s on %s: GPUs go back to their host driver first", s.operand, a, d)
			}
		case v1alpha1.WorkloadVMVGPU:
			assert.Zero(t, s.vgpus, "%s found vGPUs: they are removed first", s.operand)
			assert.Zero(t, s.vfs, "%s found SR-IOV VFs: they are disabled first", s.operand)
		}
	}

	// The host as the new config wants it.
	switch cell.to {
	case v1alpha1.WorkloadContainer:
		for a, d := range n.drivers(t) {
			assert.Equal(t, n.a.Kernel().NativeDriver(a), d, a)
		}
		vgpus, vfs := n.vgpuCounts(t)
		assert.Zero(t, vgpus+vfs)
	case v1alpha1.WorkloadVMPassthrough:
		for a, d := range n.drivers(t) {
			assert.Equal(t, "vfio-pci", d, a)
		}
	case v1alpha1.WorkloadVMVGPU:
		vgpus, _ := n.vgpuCounts(t)
		assert.NotZero(t, vgpus)
	}
	node := getNode(t, c, name)
	if need != "" {
		after, err := n.a.Host().NVIDIADriver()
		require.NoError(t, err)
		assert.Equal(t, need, after, "the node ends on the driver %s needs", cell.to)
		assert.Equal(t, need, node.Labels[names.GPUDriverLabel])
		if before != need {
			waitEvent(t, c, name, EventWaitingForDriver, 1)
		}
	}
	if cell.from == v1alpha1.WorkloadVMVGPU {
		assert.NotContains(t, node.Labels, names.VGPUConfigStateLabel, "the node left vm-vgpu")
	}
	assert.Empty(t, releaseLabels(node))
	for k := range node.Annotations {
		assert.False(t, strings.HasPrefix(k, names.ReleaseReportPrefix), "release report %s left", k)
	}
	assert.ElementsMatch(t, newOps, deployLabels(node))
	assert.Empty(t, n.a.Kernel().Violations())
}
