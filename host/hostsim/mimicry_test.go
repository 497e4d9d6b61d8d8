package hostsim_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

func isSymlink(t *testing.T, p string) bool {
	t.Helper()
	fi, err := os.Lstat(p)
	require.NoError(t, err, p)
	return fi.Mode()&os.ModeSymlink != 0
}

func under(t *testing.T, p, root string) bool {
	t.Helper()
	rel, err := filepath.Rel(root, p)
	require.NoError(t, err)
	return rel != ".." && !strings.HasPrefix(rel, "../")
}

// TestTreeLooksLikeSysfs checks every fixture's tree against the layout of
// a real kernel: symlinks where the kernel has symlinks, with targets whose
// basenames carry the meaning.
func TestTreeLooksLikeSysfs(t *testing.T) {
	for _, fx := range hostsim.Fixtures() {
		t.Run(fx.Name, func(t *testing.T) {
			k, err := fx.Build(t.TempDir())
			require.NoError(t, err)
			devicesRoot := sysPath(k, "devices")
			for _, want := range fx.Funcs {
				bus := sysPath(k, "bus/pci/devices", want.Address)
				require.True(t, isSymlink(t, bus), "bus/pci/devices/%s must be a symlink", want.Address)
				target, err := os.Readlink(bus)
				require.NoError(t, err)
				assert.False(t, filepath.IsAbs(target), "relative like the kernel's: %s", target)
				dir, err := filepath.EvalSymlinks(bus)
				require.NoError(t, err)
				assert.True(t, under(t, dir, devicesRoot), "%s resolves into devices/: %s", want.Address, dir)
				assert.Equal(t, want.Address, filepath.Base(dir))

				ov, err := os.ReadFile(filepath.Join(dir, "driver_override"))
				require.NoError(t, err)
				assert.Equal(t, "(null)\n", string(ov))
				modalias, err := os.ReadFile(filepath.Join(dir, "modalias"))
				require.NoError(t, err)
				_, err = host.ParseModalias(string(modalias))
				assert.NoError(t, err)

				drv := filepath.Join(dir, "driver")
				require.True(t, isSymlink(t, drv))
				target, err = os.Readlink(drv)
				require.NoError(t, err)
				assert.Equal(t, want.Driver, filepath.Base(target))
				drvDir, err := filepath.EvalSymlinks(drv)
				require.NoError(t, err)
				assert.Equal(t, sysPath(k, "bus/pci/drivers", want.Driver), drvDir)
				back, err := filepath.EvalSymlinks(filepath.Join(drvDir, want.Address))
				require.NoError(t, err)
				assert.Equal(t, dir, back, "the driver links back to the device")

				grp := filepath.Join(dir, "iommu_group")
				if !fx.IOMMU {
					_, err := os.Lstat(grp)
					assert.True(t, os.IsNotExist(err), "no iommu_group without IOMMU")
					continue
				}
				require.True(t, isSymlink(t, grp))
				target, err = os.Readlink(grp)
				require.NoError(t, err)
				assert.Equal(t, strconv.Itoa(want.Group), filepath.Base(target))
				gdir, err := filepath.EvalSymlinks(grp)
				require.NoError(t, err)
				assert.Equal(t, sysPath(k, "kernel/iommu_groups", strconv.Itoa(want.Group)), gdir)
				member := filepath.Join(gdir, "devices", want.Address)
				require.True(t, isSymlink(t, member))
				mdir, err := filepath.EvalSymlinks(member)
				require.NoError(t, err)
				assert.Equal(t, dir, mdir)
			}
		})
	}
}

func TestHostTreeBasics(t *testing.T) {
	k, h := hostsim.NewHost(t, "workstation")
	for _, p := range []string{"sys/bus/pci/drivers_probe", "sys/module/vfio/parameters/enable_unsafe_noiommu_mode",
		"dev/vfio/vfio", "proc/sys/kernel/osrelease", "sys/class/iommu/dmar0"} {
		assert.True(t, exists(filepath.Join(k.Root(), p)), p)
	}
	link := sysPath(k, "module/xhci_pci/drivers/pci:xhci_hcd")
	require.True(t, isSymlink(t, link))
	d, err := filepath.EvalSymlinks(link)
	require.NoError(t, err)
	assert.Equal(t, sysPath(k, "bus/pci/drivers/xhci_hcd"), d)
	assert.Equal(t, "xhci_hcd", h.DriverOfModule("xhci_pci"))

	aliases, err := os.ReadFile(filepath.Join(k.Options().ModulesDir, "modules.alias"))
	require.NoError(t, err)
	assert.Contains(t, string(aliases), "alias vfio_pci:v*d*sv*sd*bc*sc*i* vfio_pci\n")
	assert.Contains(t, string(aliases), "alias pci:v000010DEd*sv*sd*bc04sc03i00 snd_hda_intel\n")

	info, err := os.ReadFile(filepath.Join(k.Root(), "proc/driver/nvidia/gpus/0000:01:00.0/information"))
	require.NoError(t, err)
	assert.Contains(t, string(info), "Device Minor: \t 0")
	assert.True(t, exists(filepath.Join(k.Root(), "dev", "nvidia0")))
	assert.True(t, exists(filepath.Join(k.Root(), "dev", "snd", "controlC0")))

	_, off := hostsim.NewHost(t, "iommu-off")
	s, err := off.Scan()
	require.NoError(t, err)
	assert.Empty(t, s.IOMMU.Units)
}

func TestFixturesAndLookup(t *testing.T) {
	fxs := hostsim.Fixtures()
	names := map[string]bool{}
	for i, fx := range fxs {
		assert.False(t, names[fx.Name], "duplicate %s", fx.Name)
		names[fx.Name] = true
		assert.NotEmpty(t, fx.Description)
		assert.NotEmpty(t, fx.Funcs)
		if i > 0 {
			assert.Less(t, fxs[i-1].Name, fx.Name)
		}
		got, err := hostsim.Lookup(fx.Name)
		require.NoError(t, err)
		assert.Equal(t, fx.Name, got.Name)
	}
	for _, want := range []string{"a10", "workstation", "hgx-h100", "shared-nic", "iommu-off", "gh200", "gpu-in-use"} {
		assert.True(t, names[want], want)
	}
	_, err := hostsim.Lookup("dgx-zz")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dgx-zz")
	assert.Contains(t, err.Error(), "workstation")
}

func TestAddFunctionErrors(t *testing.T) {
	k, err := hostsim.New(t.TempDir(), true)
	require.NoError(t, err)
	assert.Error(t, k.AddFunction(hostsim.Func{Address: "../../x"}))
	err = k.AddFunction(hostsim.Func{Address: "0000:01:00.0", Vendor: 0x10de, Class: 0x030200, Driver: "nvidia", Group: 1, NvidiaMinor: -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nvidia")
	_, err = hostsim.New(filepath.Join(t.TempDir(), "missing"), true)
	assert.Error(t, err)
	assert.Error(t, k.SetVirtFns("0000:02:00.0", "0000:02:00.4"))
}

func TestSetVirtFns(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	vf := hostsim.Func{Address: "0000:3b:00.4", Vendor: 0x10de, Device: 0x2236, Class: 0x030200,
		Driver: "nvidia", Group: 70, PhysFn: "0000:3b:00.0", NvidiaMinor: -1}
	require.NoError(t, k.AddFunction(vf))
	require.NoError(t, k.SetVirtFns("0000:3b:00.0", "0000:3b:00.4"))
	s, err := h.Scan()
	require.NoError(t, err)
	pf, ok := s.Function("0000:3b:00.0")
	require.True(t, ok)
	assert.Equal(t, []host.Address{"0000:3b:00.4"}, pf.VirtFns)
	f, ok := s.Function("0000:3b:00.4")
	require.True(t, ok)
	assert.Equal(t, host.Address("0000:3b:00.0"), f.PhysFn)
	assert.Equal(t, 70, f.IOMMUGroup)
}
