package hostsim

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// TestTwoNVIDIADrivers: a vGPU fixture boots on the vGPU host driver
// (nvidia_vgpu_vfio loaded, vGPU files); built with DataCentreDriver it
// boots on the data-centre driver (no vGPU file), and the change between
// them is module unload and load, each refused while in use, with sysfs
// following: the way a vGPU Manager container takes the GPUs and gives them
// back to the node's data-centre driver.
func TestTwoNVIDIADrivers(t *testing.T) {
	const pf = "0000:3b:00.0"
	a := host.Address(pf)
	types := func(k *Kernel) bool {
		_, err := os.Stat(filepath.Join(k.Root(), "sys", "bus", "pci", "devices", pf, "mdev_supported_types"))
		return err == nil
	}
	driver := func(h *host.Host) string {
		d, err := h.NVIDIADriver()
		require.NoError(t, err)
		return d
	}

	k, h := NewHost(t, "t4-vgpu")
	assert.Equal(t, host.NVIDIADriverVGPUHost, driver(h), "a vGPU fixture is on the vGPU host driver")
	assert.True(t, types(k))
	assert.ErrorIs(t, k.DeleteModule(ModuleNVIDIA), syscall.EWOULDBLOCK, "nvidia_vgpu_vfio needs nvidia")

	fx, err := Lookup("t4-vgpu")
	require.NoError(t, err)
	k, err = fx.Build(t.TempDir(), DataCentreDriver())
	require.NoError(t, err)
	h = host.New(k.Options())
	assert.Equal(t, host.NVIDIADriverDataCentre, driver(h))
	assert.False(t, types(k), "the data-centre driver offers no vGPU file")
	assert.Equal(t, "nvidia", k.DriverOf(a))
	assert.ErrorIs(t, k.InitModule(k.ModuleImage(ModuleVGPUVFIO, FlavourVGPU)), syscall.ENOENT,
		"nvidia_vgpu_vfio does not load over the data-centre nvidia.ko")

	// A CUDA process holds the GPU: the data-centre driver does not let go.
	require.NoError(t, k.HoldOpen(500, "python3", "nvidia0"))
	assert.ErrorIs(t, k.DeleteModule(ModuleNVIDIA), syscall.EWOULDBLOCK)
	assert.Equal(t, "nvidia", k.DriverOf(a))
	require.NoError(t, k.Exit(500))
	require.NoError(t, k.DeleteModule(ModuleNVIDIA))
	assert.Equal(t, host.NVIDIADriverNone, driver(h))
	assert.Empty(t, k.DriverOf(a), "the GPU is unbound while no NVIDIA driver is loaded")

	// The vGPU Manager loads its build: the GPU is bound again and, with
	// nvidia_vgpu_vfio, shows its vGPU files.
	require.NoError(t, k.InitModule(k.ModuleImage(ModuleNVIDIA, FlavourVGPU)))
	assert.Equal(t, "nvidia", k.DriverOf(a), "the driver's registration probes the GPU")
	assert.Equal(t, host.NVIDIADriverDataCentre, driver(h), "nvidia.ko alone")
	require.NoError(t, k.InitModule(k.ModuleImage(ModuleVGPUVFIO, FlavourVGPU)))
	assert.Equal(t, host.NVIDIADriverVGPUHost, driver(h))
	require.True(t, types(k))

	// A vGPU keeps nvidia_vgpu_vfio loaded.
	const uuid = "a8d2b1c4-0000-4000-8000-000000000001"
	create := filepath.Join(k.Root(), "sys", "bus", "pci", "devices", pf, "mdev_supported_types", "nvidia-230", "create")
	require.NoError(t, k.WriteFile(create, []byte(uuid)))
	assert.ErrorIs(t, k.DeleteModule(ModuleVGPUVFIO), syscall.EWOULDBLOCK)
	require.NoError(t, k.WriteFile(filepath.Join(k.Root(), "sys", "bus", "mdev", "devices", uuid, "remove"), []byte("1")))

	// The vGPU Manager leaves: its modules go, the vGPU files with them, and
	// the node's data-centre driver is loaded from the modules folder by the
	// product's own loader.
	require.NoError(t, k.DeleteModule(ModuleVGPUVFIO))
	assert.False(t, types(k))
	require.NoError(t, k.DeleteModule(ModuleNVIDIA))
	assert.Equal(t, FlavourDataCentre, k.InstalledNVIDIADriver())
	require.NoError(t, h.EnsureDriver(context.Background(), "nvidia", ModuleNVIDIA))
	assert.Equal(t, host.NVIDIADriverDataCentre, driver(h))
	assert.Equal(t, "nvidia", k.DriverOf(a))
	assert.ErrorIs(t, k.InitModule(k.ModuleImage(ModuleVGPUVFIO, FlavourVGPU)), syscall.ENOENT)
	assert.Empty(t, k.Violations())
}
