package hostsim_test

import (
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// mixedTypes are a 24 GB GPU's Q types, ids from 600 up.
func mixedTypes() []hostsim.VGPUType {
	var out []hostsim.VGPUType
	for i, gb := range []int{1, 2, 3, 4, 6, 8, 12, 24} {
		out = append(out, hostsim.VGPUType{ID: 600 + i, Name: "NVIDIA A10-" + strconv.Itoa(gb) + "Q", SizeGB: gb})
	}
	return out
}

// mixedCard builds the a10 fixture's GPU (0000:3b:00.0) with a 24 GB vGPU
// card of the given mode, in mixed-size mode or not; SR-IOV modes get 16
// VFs, enabled.
func mixedCard(t *testing.T, mode hostsim.VGPUMode, mixed bool) (*hostsim.Kernel, *host.Host) {
	t.Helper()
	fx, err := hostsim.Lookup("a10")
	require.NoError(t, err)
	card := hostsim.VGPUCard{PF: "0000:3b:00.0", Mode: mode, FramebufferGB: 24, Types: mixedTypes(), MixedSize: mixed}
	if mode != hostsim.MdevPF {
		fx.Funcs[0].TotalVFs = 16
		card.TotalVFs, card.VFGroupBase = 16, 100
	}
	fx.VGPUs = []hostsim.VGPUCard{card}
	k, err := fx.Build(t.TempDir())
	require.NoError(t, err)
	h := host.New(k.Options())
	if mode != hostsim.MdevPF {
		require.NoError(t, h.SetNumVFs("0000:3b:00.0", 16))
	}
	return k, h
}

func uuidN(i int) string { return "5e1a0000-0000-4000-8000-0000000001" + strconv.Itoa(10+i) }

// available is available_instances of every type on a parent, by short name.
func available(t *testing.T, h *host.Host, parent host.Address) map[string]int {
	t.Helper()
	out := map[string]int{}
	for name, mt := range mdevTypes(t, h, parent) {
		out[name] = mt.Available
	}
	return out
}

// TestMixedSizePlacementsOnAnMdevGPU: in mixed-size mode sizes coexist on
// placements aligned to their size, each new vGPU at the lowest free one
// its size fits; available_instances counts the free placements, and a
// size with none is refused (EUSERS) even while enough framebuffer is free
// elsewhere. In equal-size mode the same GPU refuses the second size.
func TestMixedSizePlacementsOnAnMdevGPU(t *testing.T) {
	const gpu = host.Address("0000:3b:00.0")
	k, h := mixedCard(t, hostsim.MdevPF, true)
	assert.Equal(t, map[string]int{"A10-1Q": 24, "A10-2Q": 12, "A10-3Q": 8, "A10-4Q": 6, "A10-6Q": 4, "A10-8Q": 3, "A10-12Q": 2, "A10-24Q": 1}, available(t, h, gpu))

	require.NoError(t, h.CreateMdev(gpu, "nvidia-604", uuidN(0)), "A10-6Q at 0 GB")
	assert.Equal(t, map[string]int{"A10-1Q": 18, "A10-2Q": 9, "A10-3Q": 6, "A10-4Q": 4, "A10-6Q": 3, "A10-8Q": 2, "A10-12Q": 1, "A10-24Q": 0}, available(t, h, gpu),
		"every placement not overlapping 0-6 GB")
	require.NoError(t, h.CreateMdev(gpu, "nvidia-604", uuidN(1)), "A10-6Q at 6 GB")
	for i := 2; i < 5; i++ {
		require.NoError(t, h.CreateMdev(gpu, "nvidia-603", uuidN(i)), "A10-4Q at 12, 16, 20 GB")
	}
	assert.Equal(t, map[string]int{"NVIDIA A10-6Q": 2, "NVIDIA A10-4Q": 3}, k.VGPUCounts(string(gpu)))
	for name, n := range available(t, h, gpu) {
		assert.Zero(t, n, "%s: the framebuffer is full", name)
	}
	assert.ErrorIs(t, h.CreateMdev(gpu, "nvidia-600", uuidN(5)), syscall.EUSERS)

	require.NoError(t, h.RemoveMdev(uuidN(0)), "frees 0-6 GB")
	assert.Equal(t, 1, available(t, h, gpu)["A10-4Q"], "0-4 GB; 4-8 GB overlaps the A10-6Q at 6")
	assert.Equal(t, 1, available(t, h, gpu)["A10-6Q"])
	require.NoError(t, h.CreateMdev(gpu, "nvidia-603", uuidN(0)), "A10-4Q at the lowest free placement: 0 GB")
	assert.Equal(t, 1, available(t, h, gpu)["A10-2Q"], "4-6 GB")
	assert.Zero(t, available(t, h, gpu)["A10-6Q"], "2 GB free but no 6 GB placement")
	assert.ErrorIs(t, h.CreateMdev(gpu, "nvidia-604", uuidN(5)), syscall.EUSERS)

	_, eq := mixedCard(t, hostsim.MdevPF, false)
	require.NoError(t, eq.CreateMdev(gpu, "nvidia-604", uuidN(0)))
	assert.Zero(t, available(t, eq, gpu)["A10-4Q"], "equal-size mode: one size while vGPUs exist")
	assert.ErrorIs(t, eq.CreateMdev(gpu, "nvidia-603", uuidN(1)), syscall.EUSERS)
}

// TestMixedSizeOnVFs: on SR-IOV cards the placement rule holds over the
// whole GPU and every existing rule too: one vGPU per VF (a used VF shows
// nothing), creatable_vgpu_types lists another size only while a placement
// fits it, current_vgpu_type of a type with none is EINVAL, and disabling
// the VFs frees every placement.
func TestMixedSizeOnVFs(t *testing.T) {
	const pf = host.Address("0000:3b:00.0")
	vf := func(i int) host.Address {
		a := []host.Address{"0000:3b:00.4", "0000:3b:00.5", "0000:3b:00.6", "0000:3b:00.7", "0000:3b:01.0"}
		return a[i]
	}
	t.Run("mdev", func(t *testing.T) {
		_, h := mixedCard(t, hostsim.MdevVF, true)
		require.NoError(t, h.CreateMdev(vf(0), "nvidia-606", uuidN(0)), "A10-12Q at 0 GB")
		assert.Zero(t, available(t, h, vf(0))["A10-1Q"], "a VF with a vGPU shows 0")
		assert.Equal(t, 1, available(t, h, vf(1))["A10-12Q"], "12-24 GB")
		assert.Equal(t, 1, available(t, h, vf(1))["A10-4Q"], "at most one per VF")
		assert.ErrorIs(t, h.CreateMdev(vf(0), "nvidia-603", uuidN(1)), syscall.EUSERS, "one vGPU per VF")
		require.NoError(t, h.CreateMdev(vf(1), "nvidia-605", uuidN(1)), "A10-8Q at 16 GB (12-20 is not aligned)")
		assert.Zero(t, available(t, h, vf(2))["A10-8Q"])
		assert.Equal(t, 1, available(t, h, vf(2))["A10-4Q"], "12-16 GB")
		assert.Zero(t, available(t, h, vf(2))["A10-6Q"], "12-18 overlaps 16")
	})
	t.Run("vendor VFIO", func(t *testing.T) {
		k, h := mixedCard(t, hostsim.VendorVFIO, true)
		creatable := func(a host.Address) map[int]string {
			v, ok, err := h.VGPU(a)
			require.NoError(t, err)
			require.True(t, ok)
			return v.Creatable
		}
		require.NoError(t, h.SetVGPUType(vf(0), 606), "A10-12Q at 0 GB")
		assert.Empty(t, creatable(vf(0)), "a VF with a vGPU lists nothing")
		assert.Len(t, creatable(vf(1)), 7, "every size but 24 GB")
		require.NoError(t, h.SetVGPUType(vf(1), 604), "A10-6Q at 12 GB")
		require.NoError(t, h.SetVGPUType(vf(2), 604), "A10-6Q at 18 GB")
		assert.Empty(t, creatable(vf(3)), "full")
		assert.ErrorIs(t, h.SetVGPUType(vf(3), 600), syscall.EINVAL)
		require.NoError(t, h.SetVGPUType(vf(1), 0))
		assert.Equal(t, map[int]string{600: "NVIDIA A10-1Q", 601: "NVIDIA A10-2Q", 602: "NVIDIA A10-3Q", 603: "NVIDIA A10-4Q", 604: "NVIDIA A10-6Q"}, creatable(vf(3)),
			"12-18 GB free: 1, 2, 3, 4 (12-16) and 6 GB placements fit, no 8 GB one")
		require.NoError(t, h.SetNumVFs(pf, 0))
		require.NoError(t, h.SetNumVFs(pf, 16))
		assert.Len(t, creatable(vf(0)), 8, "VFs disabled: every placement free")
		assert.Empty(t, k.Violations())
	})
}
