package hostsim_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

func sysPath(k *hostsim.Kernel, p ...string) string {
	return filepath.Join(append([]string{k.Root(), "sys"}, p...)...)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func vfioNode(k *hostsim.Kernel, group string) string {
	return filepath.Join(k.Root(), "dev", "vfio", group)
}

// toVFIO moves a function to vfio-pci the way the manager does.
func toVFIO(t *testing.T, h *host.Host, a host.Address) {
	t.Helper()
	require.NoError(t, unbindCurrent(h, a))
	require.NoError(t, h.SetDriverOverride(a, "vfio-pci"))
	require.NoError(t, h.Probe(a))
}

// write writes through the kernel to a path relative to its sysfs root.
func write(k *hostsim.Kernel, rel, data string) error {
	return k.WriteFile(sysPath(k, rel), []byte(data))
}

func TestUnbindRemovesBothLinks(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	a := host.Address("0000:3b:00.0")
	require.True(t, exists(sysPath(k, "bus/pci/drivers/nvidia", string(a))))
	require.NoError(t, unbindCurrent(h, a))
	assert.False(t, exists(sysPath(k, "bus/pci/devices", string(a), "driver")))
	assert.False(t, exists(sysPath(k, "bus/pci/drivers/nvidia", string(a))))
	assert.Equal(t, "", k.DriverOf(a))
	assert.Equal(t, []hostsim.Write{{Path: "bus/pci/drivers/nvidia/unbind", Data: string(a), Address: a}}, k.Writes())

	err := h.Unbind(a, "nvidia")
	require.Error(t, err, "not bound to nvidia any more")
	assert.True(t, errors.Is(err, syscall.ENODEV), "%v", err)
}

func TestOverrideProbeBindsVFIO(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	a := host.Address("0000:3b:00.0")
	assert.False(t, exists(vfioNode(k, "12")))
	toVFIO(t, h, a)
	assert.Equal(t, "vfio-pci", k.DriverOf(a))
	assert.True(t, exists(vfioNode(k, "12")))
	dev, err := filepath.EvalSymlinks(sysPath(k, "bus/pci/drivers/vfio-pci", string(a)))
	require.NoError(t, err)
	want, err := filepath.EvalSymlinks(sysPath(k, "bus/pci/devices", string(a)))
	require.NoError(t, err)
	assert.Equal(t, want, dev)

	f, err := h.ReadFunction(a)
	require.NoError(t, err)
	assert.Equal(t, "vfio-pci", f.Driver)
	assert.Equal(t, "vfio-pci", f.DriverOverride)

	require.NoError(t, h.Probe(a), "probing a bound device is a no-op")
	assert.Equal(t, "vfio-pci", k.DriverOf(a))
}

func TestLastVFIOMemberRemovesGroupNode(t *testing.T) {
	k, h := hostsim.NewHost(t, "workstation")
	all := k.Addresses()
	require.Len(t, all, 4)
	for _, a := range all {
		toVFIO(t, h, a)
	}
	require.True(t, exists(vfioNode(k, "1")))
	for i, a := range all {
		require.NoError(t, unbindCurrent(h, a))
		assert.Equal(t, i < len(all)-1, exists(vfioNode(k, "1")), "after unbinding %s", a)
	}
}

func TestProbeWithClearedOverrideReturnsNative(t *testing.T) {
	k, h := hostsim.NewHost(t, "workstation")
	want := map[host.Address]string{"0000:01:00.0": "nvidia", "0000:01:00.1": "snd_hda_intel",
		"0000:01:00.2": "xhci_hcd", "0000:01:00.3": "nvidia-gpu"}
	for a := range want {
		toVFIO(t, h, a)
	}
	for a, d := range want {
		assert.Equal(t, d, k.NativeDriver(a))
		require.NoError(t, unbindCurrent(h, a))
		require.NoError(t, h.SetDriverOverride(a, ""))
		require.NoError(t, h.Probe(a))
		assert.Equal(t, d, k.DriverOf(a), a)
	}
	assert.False(t, exists(vfioNode(k, "1")))
	assert.Equal(t, "", k.NativeDriver("0000:99:00.0"))
	assert.Equal(t, "", k.DriverOf("0000:99:00.0"))
}

func TestVFIOProbeWithoutIOMMUFails(t *testing.T) {
	k, h := hostsim.NewHost(t, "iommu-off")
	a := host.Address("0000:3b:00.0")
	require.NoError(t, unbindCurrent(h, a))
	require.NoError(t, h.SetDriverOverride(a, "vfio-pci"))
	err := h.Probe(a)
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.EINVAL), "%v", err)
	assert.Equal(t, "", k.DriverOf(a))
	assert.False(t, exists(sysPath(k, "bus/pci/drivers/vfio-pci", string(a))))

	err = write(k, "bus/pci/drivers/vfio-pci/bind", string(a))
	assert.True(t, errors.Is(err, syscall.EINVAL), "%v", err)
	assert.Equal(t, "", k.DriverOf(a))
	entries, err := os.ReadDir(filepath.Join(k.Root(), "dev", "vfio"))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "only the container node")
}

func TestBindFile(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	a := host.Address("0000:3b:00.0")
	assert.True(t, errors.Is(write(k, "bus/pci/drivers/nvidia/bind", string(a)), syscall.EBUSY), "already bound")
	require.NoError(t, unbindCurrent(h, a))
	assert.True(t, errors.Is(write(k, "bus/pci/drivers/vfio-pci/bind", string(a)), syscall.ENODEV),
		"vfio_pci aliases match only through driver_override")
	assert.True(t, errors.Is(write(k, "bus/pci/drivers/snd_hda_intel/bind", string(a)), syscall.ENODEV))
	assert.True(t, errors.Is(write(k, "bus/pci/drivers/nvidia/bind", "not-an-address"), syscall.EINVAL))
	assert.True(t, errors.Is(write(k, "bus/pci/drivers/nvidia/bind", "0000:99:00.0"), syscall.ENODEV))
	require.NoError(t, write(k, "bus/pci/drivers/nvidia/bind", string(a)+"\n"))
	assert.Equal(t, "nvidia", k.DriverOf(a))

	require.NoError(t, unbindCurrent(h, a))
	require.NoError(t, h.SetDriverOverride(a, "vfio-pci"))
	assert.True(t, errors.Is(write(k, "bus/pci/drivers/nvidia/bind", string(a)), syscall.ENODEV),
		"driver_override excludes every other driver")
	require.NoError(t, write(k, "bus/pci/drivers/vfio-pci/bind", string(a)))
	assert.Equal(t, "vfio-pci", k.DriverOf(a))
	assert.True(t, exists(vfioNode(k, "12")))
}

func TestNewID(t *testing.T) {
	k, h := hostsim.NewHost(t, "shared-nic")
	gpu1, gpu2 := host.Address("0000:17:00.0"), host.Address("0000:65:00.0")
	require.NoError(t, unbindCurrent(h, gpu1))
	require.NoError(t, unbindCurrent(h, gpu2))
	require.NoError(t, h.SetDriverOverride(gpu2, "nvidia"))
	nic := host.Address("0000:18:00.0")
	require.NoError(t, unbindCurrent(h, nic))
	require.NoError(t, h.SetDriverOverride(nic, "vfio-pci"))
	require.NoError(t, write(k, "bus/pci/drivers/vfio-pci/new_id", "10de 2331"))
	assert.Equal(t, "vfio-pci", k.DriverOf(nic), "driver attach binds an idle device whose override names the driver")
	assert.Equal(t, "vfio-pci", k.DriverOf(gpu1), "new_id attaches the driver to idle matches")
	assert.Equal(t, "", k.DriverOf(gpu2), "an override for another driver keeps it away")
	assert.Equal(t, "mlx5_core", k.NativeDriver(nic))
	assert.True(t, exists(vfioNode(k, "30")))

	require.NoError(t, write(k, "bus/pci/drivers/nvidia/bind", string(gpu2)))
	assert.Equal(t, "nvidia", k.DriverOf(gpu2))

	for _, bad := range []string{"", "10de", "zz 2331", "10de 12345"} {
		assert.True(t, errors.Is(write(k, "bus/pci/drivers/vfio-pci/new_id", bad), syscall.EINVAL), "%q", bad)
	}
	require.NoError(t, write(k, "bus/pci/drivers/vfio-pci/remove_id", "10de 2331"))
}

func TestUnbindFromOtherDriverFails(t *testing.T) {
	k, _ := hostsim.NewHost(t, "workstation")
	a := "0000:01:00.0"
	err := write(k, "bus/pci/drivers/snd_hda_intel/unbind", a)
	assert.True(t, errors.Is(err, syscall.ENODEV), "%v", err)
	assert.Equal(t, "nvidia", k.DriverOf(host.Address(a)))
	assert.True(t, errors.Is(write(k, "bus/pci/drivers/nvidia/unbind", "0000:99:00.0"), syscall.ENODEV))
	assert.True(t, errors.Is(write(k, "bus/pci/drivers/nvidia/unbind", "../../x"), syscall.EINVAL))
	assert.Empty(t, k.Violations())
}

func TestUnbindHeldIsViolation(t *testing.T) {
	k, h := hostsim.NewHost(t, "gpu-in-use")
	err := unbindCurrent(h, "0000:3b:00.0")
	require.Error(t, err)
	assert.True(t, errors.Is(err, syscall.EBUSY), "%v", err)
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))
	v := k.Violations()
	require.Len(t, v, 1)
	assert.Contains(t, v[0], "0000:3b:00.0")
	assert.Contains(t, v[0], "nvidia0")

	require.NoError(t, unbindCurrent(h, "0000:af:00.0"), "the idle GPU unbinds")
	assert.Len(t, k.Violations(), 1)

	require.NoError(t, h.SetDriverOverride("0000:af:00.0", "vfio-pci"))
	require.NoError(t, h.Probe("0000:af:00.0"))
	require.NoError(t, k.HoldOpen(900, "qemu-kvm", "vfio/60"))
	err = unbindCurrent(h, "0000:af:00.0")
	assert.True(t, errors.Is(err, syscall.EBUSY), "%v", err)
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:af:00.0"))
	assert.True(t, exists(vfioNode(k, "60")))
	require.Len(t, k.Violations(), 2)
	assert.Contains(t, k.Violations()[1], "vfio/60")

	require.NoError(t, k.Exit(900))
	require.NoError(t, unbindCurrent(h, "0000:af:00.0"))
	assert.False(t, exists(vfioNode(k, "60")))
}

func TestCrashAfter(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	a := host.Address("0000:3b:00.0")
	k.CrashAfter(2)
	require.NoError(t, unbindCurrent(h, a))
	require.NoError(t, h.SetDriverOverride(a, "vfio-pci"))
	err := h.Probe(a)
	require.Error(t, err)
	assert.True(t, errors.Is(err, hostsim.ErrCrashed), "%v", err)
	assert.Equal(t, "", k.DriverOf(a), "the crashed probe changed nothing")
	assert.False(t, exists(vfioNode(k, "12")))
	assert.True(t, errors.Is(h.SetDriverOverride(a, ""), hostsim.ErrCrashed), "every later write fails too")
	f, err := h.ReadFunction(a)
	require.NoError(t, err)
	assert.Equal(t, "vfio-pci", f.DriverOverride)
	assert.Len(t, k.Writes(), 2)

	k.CrashAfter(0)
	require.NoError(t, h.Probe(a))
	assert.Equal(t, "vfio-pci", k.DriverOf(a))
	k.ResetWrites()
	assert.Empty(t, k.Writes())
}

func TestSetLatency(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	const delay = 30 * time.Millisecond
	var seen []hostsim.Write
	k.SetLatency(func(w hostsim.Write) time.Duration {
		seen = append(seen, w)
		return delay
	})
	start := time.Now()
	require.NoError(t, unbindCurrent(h, "0000:3b:00.0"))
	assert.GreaterOrEqual(t, time.Since(start), delay)
	require.Len(t, seen, 1)
	assert.Equal(t, "bus/pci/drivers/nvidia/unbind", seen[0].Path)
	assert.Equal(t, "", k.DriverOf("0000:3b:00.0"), "the write still takes effect")
}

func TestLoadRegistersDriver(t *testing.T) {
	k, h := hostsim.NewHost(t, "gh200")
	a := host.Address("0009:01:00.0")
	assert.False(t, exists(sysPath(k, "bus/pci/drivers/nvgrace_gpu_vfio_pci")))
	require.NoError(t, unbindCurrent(h, a))
	require.NoError(t, h.SetDriverOverride(a, "nvgrace_gpu_vfio_pci"))
	require.NoError(t, h.Probe(a))
	assert.Equal(t, "", k.DriverOf(a), "an override naming an unloaded driver binds nothing")

	loader := host.NewModuleLoader(k.Options().ModulesDir, k.Options().SysfsRoot, k)
	require.NoError(t, loader.Load(context.Background(), "nvgrace_gpu_vfio_pci"))
	require.NoError(t, loader.Load(context.Background(), "nvgrace-gpu-vfio-pci"), "loading twice is fine")
	assert.True(t, h.DriverLoaded("nvgrace_gpu_vfio_pci"))
	assert.True(t, k.ModuleLoaded("vfio_pci_core"), "modules.dep: its dependencies first")
	assert.Equal(t, "nvgrace_gpu_vfio_pci", h.DriverOfModule("nvgrace_gpu_vfio_pci"))
	for _, f := range []string{"bind", "unbind", "new_id", "remove_id"} {
		assert.True(t, exists(sysPath(k, "bus/pci/drivers/nvgrace_gpu_vfio_pci", f)), f)
	}
	require.NoError(t, h.Probe(a))
	assert.Equal(t, "nvgrace_gpu_vfio_pci", k.DriverOf(a))
	assert.True(t, exists(vfioNode(k, "5")))

	err := loader.Load(context.Background(), "no_such_module")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no_such_module")
	assert.Contains(t, err.Error(), "modules.dep")
}

func TestWritesOutsideAttributesFail(t *testing.T) {
	k, _ := hostsim.NewHost(t, "a10")
	err := k.WriteFile(filepath.Join(k.Root(), "dev", "vfio", "vfio"), []byte("x"))
	assert.True(t, errors.Is(err, syscall.EACCES), "%v", err)
	err = write(k, "bus/pci/devices/0000:3b:00.0/vendor", "0x1234")
	assert.True(t, errors.Is(err, syscall.EACCES), "%v", err)
	err = write(k, "bus/pci/devices/0000:99:00.0/driver_override", "vfio-pci")
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
	err = write(k, "bus/pci/drivers/nvgrace_gpu_vfio_pci/bind", "0000:3b:00.0")
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
	b, err := os.ReadFile(sysPath(k, "bus/pci/devices/0000:3b:00.0/vendor"))
	require.NoError(t, err)
	assert.Equal(t, "0x10de\n", string(b))
}

// unbindCurrent unbinds a function from the driver it is on now.
func unbindCurrent(h *host.Host, a host.Address) error {
	f, err := h.ReadFunction(a)
	if err != nil {
		return err
	}
	return h.Unbind(a, f.Driver)
}
