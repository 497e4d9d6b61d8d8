package vfio

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
)

func holding(id, pod, resource string) Allocations {
	return func(context.Context) (map[string][]podresources.Holder, error) {
		return map[string][]podresources.Holder{podresources.NormID(id): {{Pod: pod, Container: "compute", Resource: resource}}}, nil
	}
}

func planWith(t *testing.T, h *host.Host, alloc Allocations, target Target) *Plan {
	t.Helper()
	p, err := NewPlanner(h)
	require.NoError(t, err)
	p.UseKubelet(context.Background(), alloc)
	plan, err := p.Plan(allOf(host.VendorNVIDIA), target)
	require.NoError(t, err)
	return plan
}

// TestAllocatedButNotOpenedStays: a VM pod the kubelet gave the GPU to,
// whose QEMU has not opened it yet, keeps it: no process holds it, but the
// allocation counts (KubeVirt's ID is the PCI address, Kata's the group).
func TestAllocatedButNotOpenedStays(t *testing.T) {
	for name, id := range map[string]string{"kubevirt": "0000:3b:00.0", "kata": "", "kubevirt short": "3b:00.0"} {
		k, h := buildFixture(t, "a10")
		move(t, h, allOf(host.VendorNVIDIA), ToVFIO)
		f, err := h.ReadFunction("0000:3b:00.0")
		require.NoError(t, err)
		if id == "" {
			id = itoa(f.IOMMUGroup)
		}
		k.ResetWrites()
		plan := planWith(t, h, holding(id, "vms/virt-launcher-a", "nvidia.com/GA102GL_A10"), ToHost)
		require.Len(t, plan.Refused, 1, name)
		want := id
		if name == "kubevirt short" {
			want = "0000:3b:00.0" // the kubelet's ID, normalised, names the function
		}
		assert.Contains(t, plan.Refused[0].Reason, "in use: allocated as "+want+" to pod vms/virt-launcher-a container compute (nvidia.com/GA102GL_A10)", name)
		res := Apply(context.Background(), h, plan, ApplyOptions{})
		assert.Len(t, res.Refused, 1, name)
		assert.Empty(t, k.Writes(), "%s: nothing written", name)
		assert.Equal(t, "vfio-pci", k.DriverOf("0000:3b:00.0"), name)
	}
}

// TestContainerAllocationKeepsTheGPUOnItsDriver: NVIDIA's device plugin
// advertises GPUs by UUID (or index): an allocated GPU is not taken for
// VMs; an index only matches NVIDIA's container resources, never a VM
// resource's group of the same number.
func TestContainerAllocationKeepsTheGPUOnItsDriver(t *testing.T) {
	_, h := buildFixture(t, "a10")
	uuid := hostsim.SimulatedGPUUUID("0000:3b:00.0")
	for _, c := range []struct {
		id, resource string
		held         bool
	}{
		{uuid, "nvidia.com/gpu", true},
		{strings.ToUpper(uuid) + "::2", "nvidia.com/gpu.shared", true},
		{"0", "nvidia.com/gpu", true},
		{"0", "nvidia.com/pgpu", false},
		{"1", "nvidia.com/gpu", false},
	} {
		plan := planWith(t, h, holding(c.id, "ml/train", c.resource), ToVFIO)
		if c.held {
			require.Len(t, plan.Refused, 1, "%+v", c)
			assert.Contains(t, plan.Refused[0].Reason, "to pod ml/train", "%+v", c)
		} else {
			assert.Empty(t, plan.Refused, "%+v", c)
		}
	}
}

// TestAllocationBetweenPlanAndUnbind: a pod allocated the GPU after the
// plan; the check made right before the unbind (after the group claim)
// asks the kubelet again and keeps the GPU.
func TestAllocationBetweenPlanAndUnbind(t *testing.T) {
	k, h := buildFixture(t, "a10")
	move(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	var calls atomic.Int32
	alloc := func(ctx context.Context) (map[string][]podresources.Holder, error) {
		if calls.Add(1) == 1 {
			return nil, nil // at plan time: nothing allocated
		}
		return holding("0000:3b:00.0", "vms/late", "nvidia.com/GA102GL_A10")(ctx)
	}
	plan := planWith(t, h, alloc, ToHost)
	require.Empty(t, plan.Refused)
	k.ResetWrites()
	res := Apply(context.Background(), h, plan, ApplyOptions{Allocations: alloc})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "vms/late")
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:3b:00.0"))
	for _, w := range k.Writes() {
		assert.NotContains(t, w.Path, "unbind", "no unbind of an allocated GPU")
	}
}

// TestKubeletUnreachableRefuses: without an answer from the kubelet
// nothing that would move is moved.
func TestKubeletUnreachableRefuses(t *testing.T) {
	k, h := buildFixture(t, "a10")
	down := func(context.Context) (map[string][]podresources.Holder, error) {
		return nil, errors.New("connection refused")
	}
	plan := planWith(t, h, down, ToVFIO)
	require.Len(t, plan.Refused, 1)
	assert.Contains(t, plan.Refused[0].Reason, "cannot tell whether 0000:3b:00.0 is allocated to a pod: connection refused")
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))
}

func itoa(n int) string { return strconv.Itoa(n) }
