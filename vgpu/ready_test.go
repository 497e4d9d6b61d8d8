package vgpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

// TestReadyNamesVendorTypeIDs: the report names the vendor-specific VFIO
// type ids the manager saw the driver list, those of the vGPUs on a full
// card among them, which sysfs no longer lists (the KubeVirt device plugin
// names its resources from them).
func TestReadyNamesVendorTypeIDs(t *testing.T) {
	_, h := fixture(t, "l40s-vgpu")
	cfg, err := vgpuconfig.Default()
	require.NoError(t, err)
	res := apply(t, h, cfg, "L40S-24Q", Options{NodeName: "n"}, ApplyOptions{})
	require.True(t, res.OK())
	gpus, err := Inventory(h, memoryOf(t, h))
	require.NoError(t, err)
	ready := ReadyGPUs(gpus)
	require.NotEmpty(t, ready)
	for _, g := range ready {
		assert.Equal(t, "L40S-24Q", g.TypeIDs["1155"], g.Address)
		assert.Equal(t, "L40S-8Q", g.TypeIDs["1152"], "%s: every id the manager saw listed", g.Address)
		assert.Equal(t, map[string]int{"L40S-24Q": 2}, g.VGPUs, g.Address)
		assert.Empty(t, g.Unnamed, g.Address)
	}

	_, h = fixture(t, "a10-vgpu")
	res = apply(t, h, cfg, "A10-4Q", Options{NodeName: "n"}, ApplyOptions{})
	require.True(t, res.OK())
	gpus, err = Inventory(h, memoryOf(t, h))
	require.NoError(t, err)
	assert.Nil(t, ReadyGPUs(gpus)[0].TypeIDs, "mdev types are named by sysfs")
}
