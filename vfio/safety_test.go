package vfio

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// A process that opens the GPU between plan and apply keeps it: the last
// in-use check before unbind refuses, and driver_override is put back.
func TestApplyRechecksUseBeforeUnbind(t *testing.T) {
	k, h := buildFixture(t, "a10")
	plan := planFor(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	require.Len(t, plan.Actions, 1)
	require.NoError(t, k.HoldOpen(4343, "trainer", "nvidia0"))

	res := Apply(context.Background(), h, plan, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "in use")
	assert.Contains(t, res.Refused[0].Reason, "trainer")
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))
	f, err := h.ReadFunction("0000:3b:00.0")
	require.NoError(t, err)
	assert.Empty(t, f.DriverOverride, "no vfio override left behind on a GPU that stays with the host")
	assert.Empty(t, k.Violations())
}

// A function moved by someone else since the plan is left alone: the
// unbind names the planned driver, and nothing is written.
func TestApplyLeavesFunctionsThatMovedSincePlan(t *testing.T) {
	k, h := buildFixture(t, "gh200")
	a := host.Address("0009:01:00.0")
	plan := planFor(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	require.Equal(t, "nvgrace_gpu_vfio_pci", plan.Actions[0].To)

	require.NoError(t, h.SetDriverOverride(a, "vfio-pci"))
	require.NoError(t, h.Unbind(a, "nvidia"))
	require.NoError(t, h.Probe(a))
	require.NoError(t, k.HoldOpen(902, "qemu-kvm", "vfio/5"))
	k.ResetWrites()

	res := Apply(context.Background(), h, plan, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "changed since the plan")
	assert.Empty(t, k.Writes())
	assert.Equal(t, "vfio-pci", k.DriverOf(a))
	assert.Empty(t, k.Violations())
}

// When open files cannot be read, nothing is called idle.
func TestCannotTellIsRefused(t *testing.T) {
	_, h := buildFixture(t, "a10")
	p, err := NewPlanner(h)
	require.NoError(t, err)
	p.Usage.Unreadable = []int{31337}
	plan, err := p.Plan(allOf(host.VendorNVIDIA), ToVFIO)
	require.NoError(t, err)
	require.Len(t, plan.Refused, 1)
	assert.Contains(t, plan.Refused[0].Reason, "in use: cannot tell")
	assert.Contains(t, plan.Refused[0].Reason, "CAP_SYS_PTRACE")
	assert.Empty(t, plan.Actions)
}

// The fabric manager holding the NVSwitch control node keeps every
// NVSwitch on the host; the GPUs still move.
func TestNVSwitchesHeldByFabricManager(t *testing.T) {
	k, h := buildFixture(t, "hgx-h100")
	require.NoError(t, k.HoldOpen(1200, "nv-fabricmanager", "nvidia-nvswitchctl"))
	res := run(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	assert.Len(t, res.Actions, 8)
	require.Len(t, res.Refused, 4)
	for _, r := range res.Refused {
		assert.Contains(t, r.Reason, "nv-fabricmanager")
		assert.Equal(t, "nvidia", k.DriverOf(r.Address))
	}
}

// A GPU that parents mediated vGPU devices is in use.
func TestMdevParentRefused(t *testing.T) {
	_, h := buildFixture(t, "a10")
	dir, err := filepath.EvalSymlinks(filepath.Join(h.SysfsRoot(), "bus", "pci", "devices", "0000:3b:00.0"))
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "c0ffee00-1111-2222-3333-444455556666"), 0o755))
	plan := planFor(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	require.Len(t, plan.Refused, 1)
	assert.Contains(t, plan.Refused[0].Reason, "mediated")
}

// A failure inside a group rolls the functions already moved back, so the
// group is never left split between host drivers and vfio.
func TestFailedGroupRollsBack(t *testing.T) {
	k, h := buildFixture(t, "workstation")
	start := drivers(k)
	plan := planFor(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	last := len(plan.Actions) - 1
	require.Equal(t, host.Address("0000:01:00.0"), plan.Actions[last].Address, "the GPU moves last")
	require.NoError(t, os.MkdirAll(filepath.Join(h.SysfsRoot(), "bus", "pci", "drivers", "rejecting_vfio"), 0o755))
	plan.Actions[last].To = "rejecting_vfio"

	res := Apply(context.Background(), h, plan, ApplyOptions{})
	assert.Empty(t, res.Actions)
	require.Len(t, res.Refused, 4)
	for _, r := range res.Refused {
		if r.Address == "0000:01:00.0" {
			assert.Contains(t, r.Reason, "failed")
		} else {
			assert.Contains(t, r.Reason, "rolled back")
		}
	}
	assert.Equal(t, start, drivers(k))
	assert.Empty(t, k.Violations())
}

// A variant driver is never swapped for plain vfio-pci, even when
// modules.alias cannot be read.
func TestNoDowngradeOfVariantDriver(t *testing.T) {
	k, h := buildFixture(t, "gh200")
	require.True(t, run(t, h, allOf(host.VendorNVIDIA), ToVFIO).OK())
	require.Equal(t, "nvgrace_gpu_vfio_pci", k.DriverOf("0009:01:00.0"))
	require.NoError(t, os.Remove(filepath.Join(k.Options().ModulesDir, "modules.alias")))
	plan := planFor(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	assert.Empty(t, plan.Actions)
	assert.Empty(t, plan.Refused)
}

// A VM that kept only the VFIO device fd of a GPU (its group fd closed)
// is invisible to the /proc scan; the group claim before the unbind sees
// the busy group and the GPU stays on vfio-pci.
func TestDeviceFDOnlyHolderKeepsItsGPU(t *testing.T) {
	k, h := buildFixture(t, "a10")
	move(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	f, err := h.ReadFunction("0000:3b:00.0")
	require.NoError(t, err)
	node := "vfio/" + strconv.Itoa(f.IOMMUGroup)
	k.HoldDeviceFD(node)
	res := Apply(context.Background(), h, planFor(t, h, allOf(host.VendorNVIDIA), ToHost), ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "in use")
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:3b:00.0"))
	assert.Empty(t, k.Violations())
	k.ReleaseDeviceFD(node)
	res = Apply(context.Background(), h, planFor(t, h, allOf(host.VendorNVIDIA), ToHost), ApplyOptions{})
	assert.True(t, res.OK(), "%v", res.Refused)
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))
}
