package vfio

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

func TestPlanPerFixture(t *testing.T) {
	nv := host.VendorNVIDIA
	cases := []struct {
		name, fixture string
		sel           Selection
		target        Target
		actions       map[host.Address]string // address -> to
		order         []host.Address          // apply order when it matters
		refused       map[host.Address]string // address -> reason substring
	}{
		{name: "a10", fixture: "a10", sel: Selection{All: true, Vendor: nv}, target: ToVFIO,
			actions: map[host.Address]string{"0000:3b:00.0": "vfio-pci"}},
		{name: "workstation card moves together, consumers first", fixture: "workstation",
			sel: Selection{Devices: []host.Address{"0000:01:00.0"}, Vendor: nv}, target: ToVFIO,
			actions: map[host.Address]string{"0000:01:00.0": "vfio-pci", "0000:01:00.1": "vfio-pci", "0000:01:00.2": "vfio-pci", "0000:01:00.3": "vfio-pci"},
			order:   []host.Address{"0000:01:00.3", "0000:01:00.2", "0000:01:00.1", "0000:01:00.0"}},
		{name: "hgx without nvswitches", fixture: "hgx-h100", sel: Selection{All: true, Vendor: nv}, target: ToVFIO,
			actions: map[host.Address]string{"0000:18:00.0": "vfio-pci", "0000:2a:00.0": "vfio-pci", "0000:3a:00.0": "vfio-pci", "0000:5d:00.0": "vfio-pci",
				"0000:9a:00.0": "vfio-pci", "0000:ab:00.0": "vfio-pci", "0000:ba:00.0": "vfio-pci", "0000:db:00.0": "vfio-pci"}},
		{name: "hgx nvswitch by address", fixture: "hgx-h100", sel: Selection{Devices: []host.Address{"0000:05:00.0"}, Vendor: nv}, target: ToVFIO,
			actions: map[host.Address]string{"0000:05:00.0": "vfio-pci"}},
		{name: "gpu sharing a group with a NIC", fixture: "shared-nic", sel: Selection{All: true, Vendor: nv}, target: ToVFIO,
			actions: map[host.Address]string{"0000:65:00.0": "vfio-pci"},
			refused: map[host.Address]string{"0000:17:00.0": "group 30: shared with 0000:18:00.0"}},
		{name: "selecting the up NIC too", fixture: "shared-nic",
			sel: Selection{Devices: []host.Address{"0000:17:00.0", "0000:18:00.0"}, Vendor: nv}, target: ToVFIO,
			refused: map[host.Address]string{"0000:17:00.0": "in use", "0000:18:00.0": "in use: network interface ens1f0np0 is up"}},
		{name: "iommu off", fixture: "iommu-off", sel: Selection{All: true, Vendor: nv}, target: ToVFIO,
			refused: map[host.Address]string{"0000:3b:00.0": "iommu"}},
		{name: "gh200 variant driver", fixture: "gh200", sel: Selection{All: true, Vendor: nv}, target: ToVFIO,
			actions: map[host.Address]string{"0009:01:00.0": "nvgrace_gpu_vfio_pci"}},
		{name: "busy gpu stays, idle gpu moves", fixture: "gpu-in-use", sel: Selection{All: true, Vendor: nv}, target: ToVFIO,
			actions: map[host.Address]string{"0000:af:00.0": "vfio-pci"},
			refused: map[host.Address]string{"0000:3b:00.0": "in use: " + "/"}},
		{name: "unbind of functions already on the host is empty", fixture: "a10", sel: Selection{All: true, Vendor: nv}, target: ToHost},
		{name: "other vendor selects nothing", fixture: "a10", sel: Selection{All: true, Vendor: 0x1234}, target: ToVFIO},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, h := buildFixture(t, tc.fixture)
			before := drivers(k)
			plan := planFor(t, h, tc.sel, tc.target)
			got := map[host.Address]string{}
			for _, a := range plan.Actions {
				got[a.Address] = a.To
				assert.Equal(t, before[a.Address], a.From, "from of %s", a.Address)
			}
			if tc.actions == nil {
				tc.actions = map[host.Address]string{}
			}
			assert.Equal(t, tc.actions, got)
			if tc.order != nil {
				assert.Equal(t, tc.order, addrs(plan.Actions))
			}
			gotRefused := map[host.Address]string{}
			for _, r := range plan.Refused {
				gotRefused[r.Address] = r.Reason
			}
			require.Len(t, gotRefused, len(tc.refused), "refusals: %v", plan.Refused)
			for a, want := range tc.refused {
				assert.Contains(t, gotRefused[a], want, "reason for %s", a)
			}
			assert.Empty(t, k.Writes(), "planning must not write")
			assert.Equal(t, before, drivers(k), "planning must not change drivers")
		})
	}
}

func TestPlanRejectsUnknownDevice(t *testing.T) {
	_, h := buildFixture(t, "a10")
	p, err := NewPlanner(h)
	require.NoError(t, err)
	_, err = p.Plan(Selection{Devices: []host.Address{"0000:99:00.0"}, Vendor: host.VendorNVIDIA}, ToVFIO)
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), "0000:99:00.0")
	var missing *host.NoFunctionError
	require.ErrorAs(t, err, &missing, "the host model names the missing function")
	assert.Equal(t, filepath.Join(h.SysfsRoot(), "bus", "pci", "devices"), missing.Dir)
}

func TestPlanRefusesHeldVFIOGroupOnUnbind(t *testing.T) {
	k, h := buildFixture(t, "a10")
	res := run(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	require.True(t, res.OK(), "%v", res.Refused)
	require.NoError(t, k.HoldOpen(777, "qemu-kvm", "vfio/12"))
	k.ResetWrites()

	res = run(t, h, allOf(host.VendorNVIDIA), ToHost)
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "in use")
	assert.Contains(t, res.Refused[0].Reason, "qemu-kvm")
	assert.Empty(t, k.Writes(), "a refused group is left exactly as it was")
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:3b:00.0"))

	require.NoError(t, k.Exit(777))
	res = run(t, h, allOf(host.VendorNVIDIA), ToHost)
	require.True(t, res.OK(), "%v", res.Refused)
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))
	assert.Empty(t, k.Violations())
}

func TestPlanRefusesSRIOVFunctions(t *testing.T) {
	k, h := buildFixture(t, "a10")
	require.NoError(t, k.AddFunction(hostsimVF("0000:3b:00.4", "0000:3b:00.0", 70)))
	plan := planFor(t, h, Selection{Devices: []host.Address{"0000:3b:00.4"}, Vendor: host.VendorNVIDIA}, ToVFIO)
	require.Len(t, plan.Refused, 1)
	assert.Contains(t, plan.Refused[0].Reason, "SR-IOV VF of 0000:3b:00.0")
	plan = planFor(t, h, Selection{All: true, Vendor: host.VendorNVIDIA}, ToVFIO)
	assert.Equal(t, []host.Address{"0000:3b:00.0"}, addrs(plan.Actions), "--all skips VFs")
}
