package hostsim_test

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

const (
	u1 = "5e1a0000-0000-4000-8000-000000000001"
	u2 = "5e1a0000-0000-4000-8000-000000000002"
)

func mdevTypes(t *testing.T, h *host.Host, parent host.Address) map[string]host.MdevType {
	t.Helper()
	ts, err := h.MdevTypes(parent)
	require.NoError(t, err)
	out := map[string]host.MdevType{}
	for _, mt := range ts {
		out[host.ShortTypeName(mt.Name)] = mt
	}
	return out
}

func TestMdevCreateRemoveLikeTheKernel(t *testing.T) {
	k, h := hostsim.NewHost(t, "t4-vgpu")
	const gpu = host.Address("0000:3b:00.0")
	types := mdevTypes(t, h, gpu)
	require.Contains(t, types, "T4-4Q")
	assert.Equal(t, "nvidia-232", types["T4-4Q"].ID)
	assert.Equal(t, 4, types["T4-4Q"].Available)
	assert.Equal(t, 4, types["T4-4Q"].MaxInstances, "max_instance from the description")
	assert.Equal(t, 4096, types["T4-4Q"].FramebufferMB)
	parent, err := filepath.EvalSymlinks(filepath.Join(k.Root(), "sys/class/mdev_bus", string(gpu)))
	require.NoError(t, err)
	assert.Equal(t, string(gpu), filepath.Base(parent), "class/mdev_bus links the parent")

	require.NoError(t, h.CreateMdev(gpu, "nvidia-232", u1))
	ms, err := h.Mdevs()
	require.NoError(t, err)
	require.Len(t, ms, 1)
	m := ms[0]
	assert.Equal(t, u1, m.UUID)
	assert.Equal(t, gpu, m.Parent)
	assert.Equal(t, "nvidia-232", m.TypeID)
	assert.Equal(t, "NVIDIA T4-4Q", m.TypeName)
	assert.Equal(t, "nvidia-vgpu-vfio", m.Driver)
	require.NotEqual(t, host.NoGroup, m.IOMMUGroup)
	assert.NotEqual(t, 12, m.IOMMUGroup, "an mdev has its own IOMMU group")
	members, err := os.ReadDir(filepath.Join(k.Root(), "sys/kernel/iommu_groups", strconv.Itoa(m.IOMMUGroup), "devices"))
	require.NoError(t, err)
	require.Len(t, members, 1)
	assert.Equal(t, u1, members[0].Name())
	assert.FileExists(t, filepath.Join(k.Root(), "dev/vfio", strconv.Itoa(m.IOMMUGroup)))
	assert.Equal(t, gpu, k.Writes()[0].Address, "the write log names the parent")

	types = mdevTypes(t, h, gpu)
	assert.Equal(t, 3, types["T4-4Q"].Available, "available_instances shrink")
	assert.Equal(t, 3, types["T4-4C"].Available, "same framebuffer size: still available")
	assert.Equal(t, 0, types["T4-8Q"].Available, "another size: none while T4-4Q vGPUs exist")

	err = h.CreateMdev(gpu, "nvidia-232", u1)
	assert.ErrorIs(t, err, syscall.EEXIST, "the same UUID again")
	err = h.CreateMdev(gpu, "nvidia-233", u2)
	assert.ErrorIs(t, err, syscall.EUSERS, "T4-8Q while T4-4Q exists")

	require.NoError(t, k.HoldOpen(4000, "qemu-kvm", "vfio/"+strconv.Itoa(m.IOMMUGroup)))
	err = h.RemoveMdev(u1)
	assert.ErrorIs(t, err, syscall.EBUSY)
	require.Len(t, k.Violations(), 1, "removing a held mdev is a violation")
	assert.Contains(t, k.Violations()[0], u1)
	_, ok, err := h.ReadMdev(u1)
	require.NoError(t, err)
	assert.True(t, ok, "still there")

	require.NoError(t, k.Exit(4000))
	require.NoError(t, h.RemoveMdev(u1))
	_, ok, err = h.ReadMdev(u1)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.NoFileExists(t, filepath.Join(k.Root(), "dev/vfio", strconv.Itoa(m.IOMMUGroup)))
	assert.Equal(t, 2, mdevTypes(t, h, gpu)["T4-8Q"].Available, "all sizes back")
	assert.ErrorIs(t, h.RemoveMdev(u1), syscall.ENOENT, "gone")
}

func TestMdevCapacity(t *testing.T) {
	k, h := hostsim.NewHost(t, "t4-vgpu")
	const gpu = host.Address("0000:3b:00.0")
	for i := 0; i < 2; i++ {
		require.NoError(t, h.CreateMdev(gpu, "nvidia-233", "5e1a0000-0000-4000-8000-00000000001"+strconv.Itoa(i)))
	}
	assert.Equal(t, 0, mdevTypes(t, h, gpu)["T4-8Q"].Available)
	assert.ErrorIs(t, h.CreateMdev(gpu, "nvidia-233", u2), syscall.EUSERS)
	assert.Equal(t, map[string]int{"NVIDIA T4-8Q": 2}, k.VGPUCounts(string(gpu)))
}

func TestSRIOVMdevOnVFs(t *testing.T) {
	k, h := hostsim.NewHost(t, "a100-sriov-vgpu")
	const pf = host.Address("0000:41:00.0")
	ts, err := h.MdevTypes(pf)
	require.NoError(t, err)
	assert.Empty(t, ts, "the PF is no mdev parent")

	require.NoError(t, h.SetNumVFs(pf, 16))
	s, err := h.Scan()
	require.NoError(t, err)
	p, _ := s.Function(pf)
	require.Len(t, p.VirtFns, 16)
	assert.Equal(t, 16, p.SRIOVNumVFs)
	assert.Equal(t, host.Address("0000:41:00.4"), p.VirtFns[0])
	assert.Equal(t, host.Address("0000:41:02.3"), p.VirtFns[15])
	vf0, _ := s.Function("0000:41:00.4")
	assert.Equal(t, pf, vf0.PhysFn)
	assert.Equal(t, "nvidia", vf0.Driver)
	assert.Equal(t, 100, vf0.IOMMUGroup)
	assert.Equal(t, uint16(0x20f1), vf0.Device)

	assert.Equal(t, 1, mdevTypes(t, h, "0000:41:00.4")["A100-10C"].Available, "one vGPU per VF")
	require.NoError(t, h.CreateMdev("0000:41:00.4", "nvidia-475", u1))
	assert.Equal(t, 0, mdevTypes(t, h, "0000:41:00.4")["A100-10C"].Available, "a VF with a vGPU shows 0")
	assert.Equal(t, 1, mdevTypes(t, h, "0000:41:00.5")["A100-10C"].Available)
	assert.Equal(t, 0, mdevTypes(t, h, "0000:41:00.5")["A100-20C"].Available, "one size per GPU")
	assert.ErrorIs(t, h.CreateMdev("0000:41:00.4", "nvidia-475", u2), syscall.EUSERS)
	for i, vf := range []host.Address{"0000:41:00.5", "0000:41:00.6", "0000:41:00.7"} {
		require.NoError(t, h.CreateMdev(vf, "nvidia-475", "5e1a0000-0000-4000-8000-00000000002"+strconv.Itoa(i)))
	}
	assert.Equal(t, 0, mdevTypes(t, h, "0000:41:01.0")["A100-10C"].Available, "four A100-10C fill 40 GB")

	assert.ErrorIs(t, h.SetNumVFs(pf, 8), syscall.EBUSY, "numvfs changes only from 0")
	assert.ErrorIs(t, h.SetNumVFs(pf, 17), syscall.ERANGE)
	require.NoError(t, h.SetNumVFs(pf, 16), "the same count is a no-op")

	m, ok, err := h.ReadMdev(u1)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, k.HoldOpen(4000, "qemu-kvm", "vfio/"+strconv.Itoa(m.IOMMUGroup)))
	assert.ErrorIs(t, h.SetNumVFs(pf, 0), syscall.EBUSY)
	require.Len(t, k.Violations(), 1, "disabling VFs under a held vGPU is a violation")
	require.NoError(t, k.Exit(4000))
	require.NoError(t, h.SetNumVFs(pf, 0))
	s, err = h.Scan()
	require.NoError(t, err)
	require.Len(t, s.Functions, 1, "VFs gone")
	ms, err := h.Mdevs()
	require.NoError(t, err)
	assert.Empty(t, ms, "and their vGPUs")
}

func TestVendorVFIOCurrentVGPUType(t *testing.T) {
	k, h := hostsim.NewHost(t, "l40s-vgpu")
	const pf = host.Address("0000:41:00.0")
	_, ok, err := h.VGPU(pf)
	require.NoError(t, err)
	assert.False(t, ok, "the PF has no vGPU files")
	require.NoError(t, h.SetNumVFs(pf, 32))
	vfs := []host.Address{"0000:41:00.4", "0000:41:00.5", "0000:41:00.6"}
	v, ok, err := h.VGPU(vfs[0])
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, 0, v.Current)
	assert.Equal(t, "NVIDIA L40S-24Q", v.Creatable[1155])
	assert.Len(t, v.Creatable, 23)
	assert.NoFileExists(t, filepath.Join(k.Root(), "dev/vfio/100"), "a VF without a type is no VFIO device")

	assert.ErrorIs(t, h.SetVGPUType(vfs[0], 0), syscall.EPERM, "0 over none")
	require.NoError(t, h.SetVGPUType(vfs[0], 1155))
	assert.FileExists(t, filepath.Join(k.Root(), "dev/vfio/100"))
	assert.ErrorIs(t, h.SetVGPUType(vfs[0], 1155), syscall.EPERM, "a type over an existing one")
	v, _, _ = h.VGPU(vfs[0])
	assert.Equal(t, 1155, v.Current)
	assert.Empty(t, v.Creatable, "a used VF lists nothing")
	v, _, _ = h.VGPU(vfs[1])
	assert.Equal(t, map[int]string{1155: "NVIDIA L40S-24Q", 1165: "NVIDIA L40S-24A"}, v.Creatable, "only the size in use")
	require.NoError(t, h.SetVGPUType(vfs[1], 1165))
	v, _, _ = h.VGPU(vfs[2])
	assert.Empty(t, v.Creatable, "a full card lists nothing")
	assert.ErrorIs(t, h.SetVGPUType(vfs[2], 1155), syscall.EINVAL)

	require.NoError(t, k.HoldOpen(4000, "qemu-kvm", "vfio/100"))
	assert.ErrorIs(t, h.SetVGPUType(vfs[0], 0), syscall.EBUSY)
	assert.Len(t, k.Violations(), 1)
	require.NoError(t, k.Exit(4000))
	require.NoError(t, h.SetVGPUType(vfs[0], 0))
	assert.NoFileExists(t, filepath.Join(k.Root(), "dev/vfio/100"))
	assert.Equal(t, map[string]int{"NVIDIA L40S-24A": 1}, k.VGPUCounts(string(pf)))
	assert.Equal(t, map[string]int{}, k.VGPUCounts("0000:c1:00.0"), "the other card is untouched")
}

// TestVGPUTreeLooksLikeSysfs: what the vGPU writes create has the kernel's
// shape: relative symlinks for mdev_type, driver, iommu_group, the mdev bus
// entry, physfn and virtfnN; each VF and each mdev alone in its group.
func TestVGPUTreeLooksLikeSysfs(t *testing.T) {
	relLink := func(t *testing.T, p string) string {
		t.Helper()
		require.True(t, isSymlink(t, p), "%s is a symlink", p)
		target, err := os.Readlink(p)
		require.NoError(t, err)
		assert.False(t, filepath.IsAbs(target), "relative like the kernel's: %s -> %s", p, target)
		real, err := filepath.EvalSymlinks(p)
		require.NoError(t, err)
		return real
	}
	k, h := hostsim.NewHost(t, "a100-sriov-vgpu")
	require.NoError(t, h.SetNumVFs("0000:41:00.0", 16))
	vf := sysPath(k, "bus/pci/devices/0000:41:00.5")
	pf := relLink(t, sysPath(k, "bus/pci/devices/0000:41:00.0"))
	assert.Equal(t, pf, relLink(t, filepath.Join(vf, "physfn")))
	assert.Equal(t, relLink(t, vf), relLink(t, filepath.Join(pf, "virtfn1")))
	assert.Equal(t, sysPath(k, "kernel/iommu_groups/101"), relLink(t, filepath.Join(vf, "iommu_group")))
	assert.Equal(t, sysPath(k, "bus/pci/drivers/nvidia"), relLink(t, filepath.Join(vf, "driver")))
	assert.Equal(t, relLink(t, vf), relLink(t, sysPath(k, "class/mdev_bus/0000:41:00.5")))

	require.NoError(t, h.CreateMdev("0000:41:00.5", "nvidia-475", u1))
	dev := relLink(t, sysPath(k, "bus/mdev/devices", u1))
	assert.Equal(t, filepath.Join(relLink(t, vf), u1), dev, "the mdev lives under its parent")
	assert.Equal(t, filepath.Join(relLink(t, vf), "mdev_supported_types/nvidia-475"), relLink(t, filepath.Join(dev, "mdev_type")))
	assert.Equal(t, "nvidia-vgpu-vfio", filepath.Base(relLink(t, filepath.Join(dev, "driver"))))
	group := relLink(t, filepath.Join(dev, "iommu_group"))
	members, err := os.ReadDir(filepath.Join(group, "devices"))
	require.NoError(t, err)
	require.Len(t, members, 1)
	assert.Equal(t, dev, relLink(t, filepath.Join(group, "devices", u1)))
	assert.Equal(t, dev, relLink(t, filepath.Join(relLink(t, vf), "mdev_supported_types/nvidia-475/devices", u1)))
	assert.FileExists(t, filepath.Join(dev, "remove"))
	assert.FileExists(t, filepath.Join(k.Root(), "dev/vfio", filepath.Base(group)))
}
