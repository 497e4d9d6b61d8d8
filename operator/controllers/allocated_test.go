package controllers

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// TestAllocatedGPUSurvivesARelabel: on an HGX node in vm-passthrough, the
// kubelet allocated a GPU to a VM pod whose QEMU has not opened it yet.
// Relabelled container, the node drains: it waits for the pod. The pod
// object goes (force-deleted) while the kubelet still lists its
// allocation (its PodResources, which the stand-in kubelet serves): the
// release returns every other GPU and NVSwitch to nvidia but refuses that
// one, named with the pod in the node's message and a ReleaseRefused
// event. Once the kubelet frees it, it goes back too and the node is ready
// with container.
func TestAllocatedGPUSurvivesARelabel(t *testing.T) {
	c := startTest(t, newClock(), "container", sandboxOnAll)
	n := startSimNode(t, c, "alloc-hgx", "hgx-h100", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	n.waitReady(t, v1alpha1.WorkloadVMPassthrough)
	const res = "nvidia.com/GH100_H100_SXM5_80GB"
	allocated := host.Address("0000:18:00.0")
	pod := vmPod(t, c, n.name, "vm-alloc", res)
	n.a.Kubelet().Allocate("default", "vm-alloc", "compute", res, string(allocated))

	setNodeLabel(t, c, n.name, names.WorkloadConfigLabel, v1alpha1.WorkloadContainer)
	st := n.waitFor(t, "draining", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateDraining })
	assert.Contains(t, st.Status.Message, "default/vm-alloc")

	deletePod(t, c, pod) // gone from the API; the kubelet has not torn it down
	want := "allocated as " + string(allocated) + " to pod default/vm-alloc"
	st = n.waitFor(t, "the release refuses the allocated GPU", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.State == v1alpha1.StateReleasing && strings.Contains(s.Status.Message, want)
	})
	assert.Contains(t, st.Status.Message, string(allocated)+": in use")
	waitEvent(t, c, n.name, EventReleaseRefused, 1)
	for a, d := range n.drivers(t) {
		if a == allocated {
			assert.Equal(t, "vfio-pci", d, "the allocated GPU stays")
		} else {
			assert.Equal(t, n.a.Kernel().NativeDriver(a), d, "%s goes back", a)
		}
	}
	assert.Empty(t, deployLabels(getNode(t, c, n.name)), "nothing of container starts before the release is done")

	n.a.Kubelet().Free("default", "vm-alloc")
	n.convergedContainer(t, "after the kubelet freed the GPU")
	ev := operatorEvents(t, c, n.name)[EventReleaseRefused]
	assert.Contains(t, ev[0].Note, want)
}
