package host_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

func TestParseMdevDescription(t *testing.T) {
	for _, c := range []struct {
		desc    string
		max, fb int
	}{
		{"num_heads=4, frl_config=60, framebuffer=4096M, max_resolution=5120x2880, max_instance=6", 6, 4096},
		{"num_heads=1, frl_config=60, framebuffer=1024M, max_resolution=1280x1024, max_instance=24", 24, 1024},
		{"", 0, 0},
		{"max_instance=x, framebuffer=M", 0, 0},
		{"Single port serial", 0, 0},
	} {
		max, fb := host.ParseMdevDescription(c.desc)
		assert.Equal(t, c.max, max, c.desc)
		assert.Equal(t, c.fb, fb, c.desc)
	}
	assert.Equal(t, "A10-4Q", host.ShortTypeName("NVIDIA A10-4Q"))
	assert.Equal(t, "T4-8Q", host.ShortTypeName("GRID T4-8Q"))
	assert.Equal(t, "mtty-1", host.ShortTypeName("mtty-1"))
	assert.Equal(t, "", host.ShortTypeName("  "))
}

func TestMdevInUse(t *testing.T) {
	k, h := hostsim.NewHost(t, "t4-vgpu")
	const uuid = "5e1a0000-0000-4000-8000-000000000001"
	require.NoError(t, h.CreateMdev("0000:3b:00.0", "nvidia-232", uuid))
	m, ok, err := h.ReadMdev(uuid)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, h.CheckMdevIdle(m))

	node := "vfio/" + strconv.Itoa(m.IOMMUGroup)
	require.NoError(t, k.HoldOpen(4100, "qemu-kvm", node))
	err = h.CheckMdevIdle(m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use: "+filepath.Join(h.DevRoot(), node))
	assert.Contains(t, err.Error(), "pid 4100 (qemu-kvm)")
	require.NoError(t, k.Exit(4100))

	// The iommufd cdev of the mdev counts too.
	require.NoError(t, os.MkdirAll(filepath.Join(h.SysfsRoot(), "bus/mdev/devices", uuid, "vfio-dev", "vfio3"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(h.DevRoot(), "vfio/devices"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(h.DevRoot(), "vfio/devices/vfio3"), nil, 0o644))
	m, _, err = h.ReadMdev(uuid)
	require.NoError(t, err)
	assert.Equal(t, []string{"vfio3"}, m.VFIODevices)
	require.NoError(t, k.HoldOpen(4101, "qemu-kvm", "vfio/devices/vfio3"))
	err = h.CheckMdevIdle(m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "vfio/devices/vfio3")

	_, _, err = h.ReadMdev("../../x")
	assert.Error(t, err)
	assert.Error(t, h.CreateMdev("0000:3b:00.0", "../x", uuid))
	assert.Error(t, h.RemoveMdev("nope"))
	assert.Error(t, h.SetNumVFs("0000:3b:00.0", -1))
	assert.Error(t, h.SetVGPUType("0000:3b:00.0", -1))
	_, ok, err = h.ReadMdev("5e1a0000-0000-4000-8000-0000000000ff")
	require.NoError(t, err)
	assert.False(t, ok)
}

// TestNonPCIMdevParent: the kernel's mtty sample registers a parent that is
// no PCI function (/sys/class/mdev_bus/mtty -> devices/virtual/mtty/mtty);
// its types read by name, and its mdevs list with no PCI parent instead of
// failing every reader.
func TestNonPCIMdevParent(t *testing.T) {
	_, h := hostsim.NewHost(t, "a10")
	sys := h.SysfsRoot()
	parent := filepath.Join(sys, "devices/virtual/mtty/mtty")
	typeDir := filepath.Join(parent, "mdev_supported_types/mtty-1")
	require.NoError(t, os.MkdirAll(typeDir, 0o755))
	for name, v := range map[string]string{"name": "Single port serial", "available_instances": "24", "device_api": "vfio-pci", "create": ""} {
		require.NoError(t, os.WriteFile(filepath.Join(typeDir, name), []byte(v+"\n"), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "class/mdev_bus"), 0o755))
	require.NoError(t, os.Symlink("../../devices/virtual/mtty/mtty", filepath.Join(sys, "class/mdev_bus/mtty")))
	ts, err := h.MdevTypes("mtty")
	require.NoError(t, err)
	require.Len(t, ts, 1)
	assert.Equal(t, host.MdevType{ID: "mtty-1", Name: "Single port serial", Available: 24}, ts[0])

	const uuid = "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"
	require.NoError(t, os.MkdirAll(filepath.Join(parent, uuid), 0o755))
	require.NoError(t, os.Symlink("../mdev_supported_types/mtty-1", filepath.Join(parent, uuid, "mdev_type")))
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "bus/mdev/devices"), 0o755))
	require.NoError(t, os.Symlink("../../../devices/virtual/mtty/mtty/"+uuid, filepath.Join(sys, "bus/mdev/devices", uuid)))
	ms, err := h.Mdevs()
	require.NoError(t, err)
	require.Len(t, ms, 1)
	assert.Equal(t, host.Address(""), ms[0].Parent)
	assert.Equal(t, "mtty", ms[0].ParentName)
	assert.Equal(t, "Single port serial", ms[0].TypeName)
	_, err = h.MdevTypes("../x")
	assert.Error(t, err)
}

// An mdev's iommu_group link is read as strictly as a function's.
func TestMdevMalformedIOMMUGroupLink(t *testing.T) {
	const uuid = "5e1a0000-0000-4000-8000-000000000001"
	for _, target := range []string{"../../../kernel/iommu_groups/abc", "../../../kernel/iommu_groups/+5"} {
		t.Run(target, func(t *testing.T) {
			k, h := hostsim.NewHost(t, "a10")
			require.NoError(t, k.AddMdev("0000:3b:00.0", uuid, "nvidia-558", "NVIDIA A10-4Q", 100))
			dir := filepath.Join(h.SysfsRoot(), "bus", "mdev", "devices", uuid)
			require.NoError(t, os.Remove(filepath.Join(dir, "iommu_group")))
			require.NoError(t, os.Symlink(target, filepath.Join(dir, "iommu_group")))
			_, err := h.Mdevs()
			require.Error(t, err)
			assert.Contains(t, err.Error(), filepath.Join(dir, "iommu_group"))
			assert.Contains(t, err.Error(), filepath.Base(target))
		})
	}
}

// FuzzParseMdevDescription: any mdev type description gives counts that
// are zero or positive, never a panic, and the two it reads, written back,
// read the same whatever else the description says.
func FuzzParseMdevDescription(f *testing.F) {
	for _, s := range []string{
		"num_heads=4, frl_config=60, framebuffer=4096M, max_resolution=5120x2880, max_instance=6",
		"max_instance=0", "framebuffer=-1M", "framebuffer=99999999999999999999M", "max_instance==3,,", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, desc string) {
		n, fb := host.ParseMdevDescription(desc)
		if n < 0 || fb < 0 {
			t.Fatalf("%q gave %d instances, %d MB", desc, n, fb)
		}
		n2, fb2 := host.ParseMdevDescription(fmt.Sprintf("framebuffer=%dM, max_instance=%d", fb, n))
		if n2 != n || fb2 != fb {
			t.Fatalf("%q gave %d, %d; written back %d, %d", desc, n, fb, n2, fb2)
		}
		if n3, fb3 := host.ParseMdevDescription("num_heads=4, " + desc + ", frl_config=60"); n3 != n || fb3 != fb {
			t.Fatalf("%q gave %d, %d; among other fields %d, %d", desc, n, fb, n3, fb3)
		}
	})
}
