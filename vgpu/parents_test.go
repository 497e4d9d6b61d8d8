package vgpu

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

// An mdev parent that is no NVIDIA GPU is taken as a GPU only when
// Options.Parents names it: after NVIDIA's, its types named by the map (a
// type the map leaves out is not offered, its mdev is unnamed), and planned
// like any GPU. Inventory, as every program calls it, does not see it.
// test/realkernel runs the whole pass this way on the kernel's mtty driver.
func TestParentsTakeAForeignMdevParent(t *testing.T) {
	k, h := fixture(t, "a100-sriov-vgpu")
	const pf, dual, single = "0000:90:00.0", "0c0ffee0-0000-4000-8000-0000000000d2", "0c0ffee0-0000-4000-8000-0000000000d1"
	require.NoError(t, k.AddFunction(hostsim.Func{Address: pf, Vendor: 0x1b36, Device: 0x0010, Class: 0x010802, Group: 90, NvidiaMinor: -1}))
	require.NoError(t, k.AddMdev(pf, dual, "mtty-2", "Dual port serial", 91))
	require.NoError(t, k.AddMdev(pf, single, "mtty-1", "Single port serial", 92))

	nvidia, err := Inventory(h, nil)
	require.NoError(t, err)
	for _, g := range nvidia {
		require.NotEqual(t, host.Address(pf), g.Address, "Inventory took a parent that is no NVIDIA GPU")
	}
	o := Options{NodeName: testNode, Parents: []Parent{{Name: pf, Types: map[string]string{"mtty-2": "MTTY-2Q"}}}}
	gpus, err := inventory(h, o)
	require.NoError(t, err)
	require.Len(t, gpus, len(nvidia)+1)
	for i, g := range nvidia {
		require.Equal(t, g.Address, gpus[i].Address)
	}
	g := gpus[len(nvidia)]
	require.Equal(t, len(nvidia), g.Index)
	require.Equal(t, host.Address(pf), g.Address)
	require.Equal(t, vgpuconfig.DeviceID{Vendor: 0x1b36, Device: 0x0010}, g.ID)
	require.Equal(t, BackendMdev, g.Backend)
	require.Equal(t, []TypeInfo{{Name: "MTTY-2Q", ID: "mtty-2", SizeGB: 2, Max: 2, MaxFrom: "available_instances"}}, g.Types)
	require.ElementsMatch(t, []VGPU{
		{ID: dual, Type: "MTTY-2Q", TypeID: "mtty-2", Parent: pf},
		{ID: single, Type: "", TypeID: "mtty-1", Parent: pf},
	}, g.VGPUs)

	cfg := parse(t, testConfig)
	p, err := PlanConfig(context.Background(), h, cfg, "none", o)
	require.NoError(t, err)
	gp := p.GPUs[len(nvidia)]
	require.True(t, gp.Managed)
	require.Empty(t, gp.Refused)
	require.ElementsMatch(t, []Step{
		{Op: OpRemove, GPU: g.Index, Address: pf, ID: dual, Type: "MTTY-2Q", TypeID: "mtty-2", Parent: pf},
		{Op: OpRemove, GPU: g.Index, Address: pf, ID: single, TypeID: "mtty-1", Parent: pf},
	}, gp.Steps)
}
