package vfio

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// The HGX H100 fixture's GPUs in index order: 0-3 on NUMA node 0, 4-7 on
// NUMA node 1, each alone in its IOMMU group (20 + index).
var hgxGPUs = []host.Address{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
	"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}

func hgx(i ...int) []host.Address {
	out := []host.Address{}
	for _, n := range i {
		out = append(out, hgxGPUs[n])
	}
	return out
}

func splitOf(t *testing.T, h *host.Host, decl string, names map[uint16]string) (*Split, error) {
	t.Helper()
	v, err := ParseVMGPUs(decl)
	require.NoError(t, err, decl)
	p, err := NewPlanner(h)
	require.NoError(t, err)
	return p.Split(v, host.VendorNVIDIA, names)
}

func mustSplit(t *testing.T, h *host.Host, decl string, names map[uint16]string) *Split {
	t.Helper()
	s, err := splitOf(t, h, decl, names)
	require.NoError(t, err, decl)
	return s
}

// TestParseVMGPUs: the annotation's forms, and bad values refused with
// ErrBadInput quoting the value.
func TestParseVMGPUs(t *testing.T) {
	for _, s := range []string{"", "all", " ALL ", "0", "2", "index:0,2", "index: 3 , 1", "Index:0", "model:2236", "model:A10", "model:GA102GL_A10", "model: H100 SXM5"} {
		_, err := ParseVMGPUs(s)
		assert.NoError(t, err, s)
	}
	v, err := ParseVMGPUs("index: 3 , 1")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3}, v.indices)
	for _, s := range []string{"three", "-1", "2.5", "index:", "index:1,,2", "index:a", "index:1,1", "index:-1", "model:", "model:[]", "count:2", "5000", "gpu:0"} {
		_, err := ParseVMGPUs(s)
		require.ErrorIs(t, err, ErrBadInput, s)
		assert.Contains(t, err.Error(), `"`+s+`"`, "the error quotes the value")
	}
}

// TestSplitCountIsNUMAAware: on the HGX H100 (2 NUMA nodes of 4 GPUs) a
// count fills NUMA node 1 first, lowest address first, and spills into
// NUMA node 0 only past 4; NVSwitches and NICs are never GPUs.
func TestSplitCountIsNUMAAware(t *testing.T) {
	_, h := buildFixture(t, "hgx-h100")
	for decl, vm := range map[string][]host.Address{
		"0": hgx(), "1": hgx(4), "2": hgx(4, 5), "4": hgx(4, 5, 6, 7), "6": hgx(0, 1, 4, 5, 6, 7), "8": hgxGPUs, "all": hgxGPUs,
	} {
		s := mustSplit(t, h, decl, nil)
		assert.Equal(t, vm, s.VM, decl)
		assert.Len(t, s.Container, 8-len(vm), decl)
	}
	_, err := splitOf(t, h, "9", nil)
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), "this node has 8 GPUs")
}

// TestSplitCountSpansFewestNUMANodes: with 4 GPUs on NUMA node 0 and 2 on
// NUMA node 1, three VM GPUs come from node 0 alone rather than from both;
// two come from node 1 (the highest that holds them).
func TestSplitCountSpansFewestNUMANodes(t *testing.T) {
	k, h := buildFixture(t, "a10") // 0000:3b:00.0 on NUMA node 0
	for i, a := range []struct {
		addr string
		numa int
	}{{"0000:5e:00.0", 0}, {"0000:60:00.0", 0}, {"0000:61:00.0", 0}, {"0000:af:00.0", 1}, {"0000:d8:00.0", 1}} {
		require.NoError(t, k.AddFunction(hostsim.Func{Address: a.addr, Vendor: 0x10de, Device: 0x2236, SubVendor: 0x10de, SubDevice: 0x1482,
			Class: 0x030200, Driver: "nvidia", Group: 70 + i, NUMA: a.numa, NvidiaMinor: 1 + i}))
	}
	assert.Equal(t, []host.Address{"0000:3b:00.0", "0000:5e:00.0", "0000:60:00.0"}, mustSplit(t, h, "3", nil).VM)
	assert.Equal(t, []host.Address{"0000:af:00.0", "0000:d8:00.0"}, mustSplit(t, h, "2", nil).VM)
	assert.Equal(t, []host.Address{"0000:3b:00.0", "0000:5e:00.0", "0000:60:00.0", "0000:af:00.0", "0000:d8:00.0"},
		mustSplit(t, h, "5", nil).VM, "node 1 whole, then node 0: node 0 keeps the container GPU")
}

// TestSplitIndicesAndModels: indices as nvidia-smi numbers the GPUs
// (NVSwitches not counted), models by device id or by a whole word of the
// pci.ids name (case-insensitive; A10 is not A100); names need pci.ids.
func TestSplitIndicesAndModels(t *testing.T) {
	_, h := buildFixture(t, "hgx-h100")
	assert.Equal(t, hgx(0, 2), mustSplit(t, h, "index:2,0", nil).VM)
	assert.Equal(t, hgx(1, 3, 4, 5, 6, 7), mustSplit(t, h, "index:2,0", nil).Container)
	_, err := splitOf(t, h, "index:8", nil)
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), "no GPU 8: this node has 8 GPUs (0 to 7)")

	names := map[uint16]string{0x2330: "GH100 [H100 SXM5 80GB]", 0x22a3: "GH100 [H100 NVSwitch]"}
	for _, decl := range []string{"model:2330", "model:H100", "model:h100 sxm5", "model:GH100_H100"} {
		assert.Equal(t, hgxGPUs, mustSplit(t, h, decl, names).VM, decl)
	}
	_, err = splitOf(t, h, "model:H100", nil)
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), "needs a pci.ids file")
	assert.Contains(t, err.Error(), "model:2330", "the error suggests the id form")
	_, err = splitOf(t, h, "model:H10", names)
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), "matches no GPU of this node (it has 8 x 2330 GH100 [H100 SXM5 80GB])")

	_, a10 := buildFixture(t, "gpu-in-use") // two A10s
	a10Names := map[uint16]string{0x2236: "GA102GL [A10]"}
	assert.Len(t, mustSplit(t, a10, "model:A10", a10Names).VM, 2)
	_, err = splitOf(t, a10, "model:A100", a10Names)
	require.ErrorIs(t, err, ErrBadInput, "A100 is not A10")
}

// TestSplitCountIsStable: GPUs already on vfio are kept: from 2 to 3 adds
// one; from 3 to 1 keeps one and returns two; a GPU in use on vfio (a VM
// holds its group) is the one kept when shrinking, and an idle host GPU is
// preferred to one a container uses when growing.
func TestSplitCountIsStable(t *testing.T) {
	k, h := buildFixture(t, "hgx-h100")
	move(t, h, Selection{Devices: hgx(4, 6)}, ToVFIO) // not where a fresh "2" would go
	assert.Equal(t, hgx(4, 6), mustSplit(t, h, "2", nil).VM, "kept")
	assert.Equal(t, hgx(4, 5, 6), mustSplit(t, h, "3", nil).VM, "one added")
	assert.Equal(t, hgx(4), mustSplit(t, h, "1", nil).VM)

	require.NoError(t, k.HoldOpen(900, "qemu-kvm", "vfio/26")) // GPU 6's group
	assert.Equal(t, hgx(6), mustSplit(t, h, "1", nil).VM, "the GPU a VM holds stays a VM GPU")
	require.NoError(t, k.HoldOpen(901, "python3", "nvidia5")) // a container on GPU 5
	assert.Equal(t, hgx(4, 6, 7), mustSplit(t, h, "3", nil).VM, "an idle GPU rather than the busy one")

	p, err := NewPlanner(h)
	require.NoError(t, err)
	p.UseKubelet(context.Background(), holding("0000:9a:00.0", "vms/virt-launcher-a", "nvidia.com/GH100_H100_SXM5_80GB"))
	v, err := ParseVMGPUs("1")
	require.NoError(t, err)
	s, err := p.Split(v, host.VendorNVIDIA, nil)
	require.NoError(t, err)
	assert.Equal(t, hgx(4), s.VM, "of two busy VM GPUs one is kept; the other will be refused as in use")
}

// pairsHost is a host without ACS: two pairs of A10s, each pair in one
// IOMMU group (70 on NUMA node 1, 71 on NUMA node 0), and, with lone, an
// A10 alone in group 12 on NUMA node 0.
func pairsHost(t *testing.T, lone bool) *host.Host {
	t.Helper()
	fx, err := hostsim.Lookup("a10")
	require.NoError(t, err)
	if !lone {
		fx.Funcs = nil
	}
	for i, a := range []struct {
		addr        string
		group, numa int
	}{{"0000:5e:00.0", 71, 0}, {"0000:5f:00.0", 71, 0}, {"0000:af:00.0", 70, 1}, {"0000:b0:00.0", 70, 1}} {
		fx.Funcs = append(fx.Funcs, hostsim.Func{Address: a.addr, Vendor: 0x10de, Device: 0x2236, SubVendor: 0x10de, SubDevice: 0x1482,
			Class: 0x030200, Driver: "nvidia", Group: a.group, NUMA: a.numa, NvidiaMinor: 1 + i})
	}
	k, err := fx.Build(t.TempDir())
	require.NoError(t, err)
	return host.New(k.Options())
}

// TestSplitCountTakesWholeGroups: GPUs that share an IOMMU group (no ACS)
// are counted together: a pair is never split; a lone GPU fills an odd
// count; where NUMA order alone cannot make the count, any whole groups
// that make it are taken; a count that no whole groups make is bad input
// naming the groups; what is on vfio stays.
func TestSplitCountTakesWholeGroups(t *testing.T) {
	h := pairsHost(t, true)
	pair70, pair71 := []host.Address{"0000:af:00.0", "0000:b0:00.0"}, []host.Address{"0000:5e:00.0", "0000:5f:00.0"}
	assert.Equal(t, []host.Address{"0000:3b:00.0"}, mustSplit(t, h, "1", nil).VM, "the lone GPU, not half a pair")
	assert.Equal(t, pair70, mustSplit(t, h, "2", nil).VM)
	assert.Equal(t, append([]host.Address{"0000:3b:00.0"}, pair71...), mustSplit(t, h, "3", nil).VM, "NUMA node 0 alone holds 3")
	assert.Equal(t, append(append([]host.Address{}, pair71...), pair70...), mustSplit(t, h, "4", nil).VM)
	assert.Len(t, mustSplit(t, h, "5", nil).VM, 5)
	move(t, h, Selection{Devices: pair71}, ToVFIO)
	assert.Equal(t, pair71, mustSplit(t, h, "2", nil).VM, "the pair on vfio stays")

	_, err := splitOf(t, pairsHost(t, false), "3", nil)
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), `"3": GPUs that share an IOMMU group move together, and no 3 of this node's GPUs make whole groups `+
		`(group 71: 0000:5e:00.0 0000:5f:00.0; group 70: 0000:af:00.0 0000:b0:00.0)`)
}
