package vgpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

// TestReadyNamesVendorTypeIDs: the report names the vendor-specific VFIO
// type ids of the vGPUs on a full card, which sysfs no longer lists (the
// KubeVirt device plugin names its resources from them).
func TestReadyNamesVendorTypeIDs(t *testing.T) {
	_, h := fixture(t, "l40s-vgpu")
	cfg, err := vgpuconfig.Default()
	require.NoError(t, err)
	res := apply(t, h, cfg, "L40S-24Q", Options{NodeName: "n"}, ApplyOptions{})
	require.True(t, res.OK())
	gpus, err := Inventory(h, nil)
	require.NoError(t, err)
	ready := ReadyGPUs(gpus)
	require.NotEmpty(t, ready)
	for _, g := range ready {
		assert.Equal(t, map[string]string{"1155": "L40S-24Q"}, g.TypeIDs, g.Address)
		assert.Equal(t, map[string]int{"L40S-24Q": 2}, g.VGPUs, g.Address)
	}

	_, h = fixture(t, "a10-vgpu")
	res = apply(t, h, cfg, "A10-4Q", Options{NodeName: "n"}, ApplyOptions{})
	require.True(t, res.OK())
	gpus, err = Inventory(h, nil)
	require.NoError(t, err)
	assert.Nil(t, ReadyGPUs(gpus)[0].TypeIDs, "mdev types are named by sysfs")
}
