package deviceplugin

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestVFIOSpecsUnderTheNodesDev: host paths are under the node's /dev as
// the runtime sees it; container paths are always under /dev.
func TestVFIOSpecsUnderTheNodesDev(t *testing.T) {
	specs := VFIOSpecs("", 12, []string{"vfio3"}, true)
	var got [][2]string
	for _, s := range specs {
		got = append(got, [2]string{s.HostPath, s.ContainerPath})
		assert.Equal(t, "mrw", s.Permissions)
	}
	assert.Equal(t, [][2]string{{"/dev/vfio/vfio", "/dev/vfio/vfio"}, {"/dev/vfio/12", "/dev/vfio/12"},
		{"/dev/iommu", "/dev/iommu"}, {"/dev/vfio/devices/vfio3", "/dev/vfio/devices/vfio3"}}, got)

	specs = VFIOSpecs("/sim/node/dev", 12, nil, false)
	assert.Equal(t, "/sim/node/dev/vfio/12", specs[1].HostPath)
	assert.Equal(t, "/dev/vfio/12", specs[1].ContainerPath)
}
