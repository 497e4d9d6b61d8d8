package host_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// funcDir is the real directory of a function (what the bus link points to).
func funcDir(t *testing.T, h *host.Host, addr string) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(filepath.Join(h.SysfsRoot(), "bus", "pci", "devices", addr))
	require.NoError(t, err)
	return d
}

func scanErr(t *testing.T, h *host.Host) error {
	t.Helper()
	s, err := h.Scan()
	require.Error(t, err)
	assert.Nil(t, s)
	return err
}

func TestScanMissingVendor(t *testing.T) {
	_, h := hostsim.NewHost(t, "a10")
	p := filepath.Join(funcDir(t, h, "0000:3b:00.0"), "vendor")
	require.NoError(t, os.Remove(p))
	err := scanErr(t, h)
	assert.Contains(t, err.Error(), filepath.Join(h.SysfsRoot(), "bus", "pci", "devices", "0000:3b:00.0", "vendor"))
	assert.True(t, errors.Is(err, os.ErrNotExist))
}

func TestScanMalformedAttributes(t *testing.T) {
	cases := []struct{ attr, content string }{
		{"class", "VGA compatible controller\n"},
		{"class", "0x03020000\n"},
		{"vendor", "nvidia\n"},
		{"device", "0x22360\n"},
		{"subsystem_vendor", "0xzz\n"},
		{"numa_node", "zero\n"},
		{"sriov_totalvfs", "many\n"},
	}
	for _, c := range cases {
		t.Run(c.attr, func(t *testing.T) {
			_, h := hostsim.NewHost(t, "a10")
			testutil.WriteFile(t, filepath.Join(funcDir(t, h, "0000:3b:00.0"), c.attr), c.content)
			err := scanErr(t, h)
			assert.Contains(t, err.Error(), filepath.Join(h.SysfsRoot(), "bus", "pci", "devices", "0000:3b:00.0", c.attr))
		})
	}
}

func TestScanNumberErrorsWrap(t *testing.T) {
	_, h := hostsim.NewHost(t, "a10")
	testutil.WriteFile(t, filepath.Join(funcDir(t, h, "0000:3b:00.0"), "numa_node"), "x\n")
	err := scanErr(t, h)
	assert.True(t, errors.Is(err, strconv.ErrSyntax), "%v", err)
}

func TestScanMalformedIOMMUGroupLink(t *testing.T) {
	for _, target := range []string{"../../../kernel/iommu_groups/abc", "../../../kernel/iommu_groups/-3", "../../../kernel/iommu_groups/+5"} {
		t.Run(target, func(t *testing.T) {
			_, h := hostsim.NewHost(t, "a10")
			link := filepath.Join(funcDir(t, h, "0000:3b:00.0"), "iommu_group")
			require.NoError(t, os.Remove(link))
			require.NoError(t, os.Symlink(target, link))
			err := scanErr(t, h)
			assert.Contains(t, err.Error(), filepath.Join(h.SysfsRoot(), "bus", "pci", "devices", "0000:3b:00.0", "iommu_group"))
			assert.Contains(t, err.Error(), filepath.Base(target))
		})
	}
}

func TestScanMalformedLinks(t *testing.T) {
	_, h := hostsim.NewHost(t, "a10")
	dir := funcDir(t, h, "0000:3b:00.0")
	require.NoError(t, os.Symlink("../not-a-bdf", filepath.Join(dir, "physfn")))
	err := scanErr(t, h)
	assert.Contains(t, err.Error(), filepath.Join(h.SysfsRoot(), "bus", "pci", "devices", "0000:3b:00.0", "physfn"))

	_, h = hostsim.NewHost(t, "a10")
	dir = funcDir(t, h, "0000:3b:00.0")
	require.NoError(t, os.Symlink("../x/../../y", filepath.Join(dir, "virtfn0")))
	err = scanErr(t, h)
	assert.Contains(t, err.Error(), "virtfn0")
}

func TestScanRejectsNonCanonicalEntry(t *testing.T) {
	for _, name := range []string{"3b:00.0", "0000:3B:00.0", "not-a-device"} {
		t.Run(name, func(t *testing.T) {
			_, h := hostsim.NewHost(t, "a10")
			devices := filepath.Join(h.SysfsRoot(), "bus", "pci", "devices")
			require.NoError(t, os.Symlink("0000:3b:00.0", filepath.Join(devices, name)))
			err := scanErr(t, h)
			assert.Contains(t, err.Error(), filepath.Join(devices, name))
		})
	}
}

// A VF that disappears while Scan runs (its bus link left dangling) is
// skipped, not an error.
func TestScanSkipsVanishedFunction(t *testing.T) {
	_, h := hostsim.NewHost(t, "a10")
	devices := filepath.Join(h.SysfsRoot(), "bus", "pci", "devices")
	require.NoError(t, os.Symlink("../../../devices/pci0000:00/0000:3b:00.4", filepath.Join(devices, "0000:3b:00.4")))
	s := scan(t, h)
	assert.Equal(t, []host.Address{"0000:3b:00.0"}, addrsOf(s.Functions))
}

func TestScanSRIOVLinks(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	dir := funcDir(t, h, "0000:3b:00.0")
	testutil.WriteFile(t, filepath.Join(dir, "sriov_totalvfs"), "16\n")
	testutil.WriteFile(t, filepath.Join(dir, "sriov_numvfs"), "2\n")
	require.NoError(t, os.Symlink("../0000:3b:00.5", filepath.Join(dir, "virtfn1")))
	require.NoError(t, os.Symlink("../0000:3b:00.4", filepath.Join(dir, "virtfn0")))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "vfio-dev", "vfio3"), 0o755))
	f, err := h.ReadFunction("0000:3b:00.0")
	require.NoError(t, err)
	assert.Equal(t, 16, f.SRIOVTotalVFs)
	assert.Equal(t, 2, f.SRIOVNumVFs)
	assert.Equal(t, []host.Address{"0000:3b:00.4", "0000:3b:00.5"}, f.VirtFns)
	assert.Equal(t, []string{"vfio3"}, f.VFIODevices)

	require.NoError(t, k.HoldOpen(5, "qemu", "vfio/devices/vfio3"))
	u := mustUsage(t, h)
	reasons, err := h.InUse(f, u)
	require.NoError(t, err)
	require.Len(t, reasons, 1)
	assert.Contains(t, reasons[0], filepath.Join("vfio", "devices", "vfio3"))
}

func TestScanUnsafeNoIOMMU(t *testing.T) {
	for _, name := range []string{"iommu-off", "a10"} {
		t.Run(name, func(t *testing.T) {
			_, h := hostsim.NewHost(t, name)
			p := filepath.Join(h.SysfsRoot(), "module", "vfio", "parameters", "enable_unsafe_noiommu_mode")
			assert.False(t, scan(t, h).IOMMU.UnsafeNoIOMMU)
			testutil.WriteFile(t, p, "Y\n")
			s := scan(t, h)
			assert.True(t, s.IOMMU.UnsafeNoIOMMU)
			assert.Equal(t, name == "a10", s.IOMMU.Enabled, "no-IOMMU mode does not turn the IOMMU on")
		})
	}
}

// Groups without /sys/class/iommu units (some platforms) still mean an
// IOMMU; groups in unsafe no-IOMMU mode do not.
func TestScanIOMMUFromGroups(t *testing.T) {
	_, h := hostsim.NewHost(t, "a10")
	require.NoError(t, os.RemoveAll(filepath.Join(h.SysfsRoot(), "class", "iommu", "dmar0")))
	assert.True(t, scan(t, h).IOMMU.Enabled)
	testutil.WriteFile(t, filepath.Join(h.SysfsRoot(), "module", "vfio", "parameters", "enable_unsafe_noiommu_mode"), "Y\n")
	assert.False(t, scan(t, h).IOMMU.Enabled)
}

func TestScanMissingDevicesDir(t *testing.T) {
	h := host.New(host.Options{SysfsRoot: t.TempDir()})
	err := scanErr(t, h)
	assert.True(t, errors.Is(err, os.ErrNotExist))
}

// TestScanRealSysfs runs Scan unchanged against this machine's /sys.
func TestScanRealSysfs(t *testing.T) {
	entries, err := os.ReadDir("/sys/bus/pci/devices")
	if err != nil || len(entries) == 0 {
		t.Skipf("no PCI functions in /sys/bus/pci/devices on this machine (%v)", err)
	}
	h := host.New(host.Options{Links: downLinks{}})
	s, err := h.Scan()
	require.NoError(t, err)
	require.NotEmpty(t, s.Functions)
	roles := map[host.Role]bool{host.RoleGPU: true, host.RoleAudio: true, host.RoleUSB: true,
		host.RoleSerial: true, host.RoleNVSwitch: true, host.RoleOther: true}
	for _, f := range s.Functions {
		a, err := host.ParseAddress(string(f.Address))
		require.NoError(t, err)
		assert.Equal(t, f.Address, a)
		assert.True(t, roles[f.Role], "%s: role %q", f.Address, f.Role)
		assert.Equal(t, f.Role, host.RoleOf(f.Vendor, f.Class))
		assert.Contains(t, s.GroupMembers(f), f)
		assert.Contains(t, s.CardFunctions(f), f)
		if f.Modalias != "" {
			_, err := host.ParseModalias(f.Modalias)
			assert.NoError(t, err, f.Address)
		}
	}
	for id, g := range s.Groups {
		assert.Equal(t, id, g.ID)
		assert.NotEmpty(t, g.Members)
	}
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skipf("no /proc on this machine: %v", err)
	}
	// A child holds a file open; this process itself is never reported.
	held, err := os.Open(os.Args[0])
	require.NoError(t, err)
	defer held.Close()
	child := exec.Command("sleep", "60")
	child.Stdin = held
	require.NoError(t, child.Start())
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	exe, err := filepath.Abs(os.Args[0])
	require.NoError(t, err)
	exe, err = filepath.EvalSymlinks(exe)
	require.NoError(t, err)
	var u *host.Usage
	deadline := time.Now().Add(10 * time.Second)
	for {
		u, err = h.ScanUsage()
		require.NoError(t, err)
		if len(u.Holders(exe)) > 0 || time.Now().After(deadline) {
			break
		}
	}
	pids := []int{}
	for _, hd := range u.Holders(exe) {
		pids = append(pids, hd.PID)
	}
	assert.Contains(t, pids, child.Process.Pid, "the child holding the file is found")
	assert.NotContains(t, pids, os.Getpid(), "the scanning process is not a holder")
	for _, f := range s.Functions {
		_, err := h.InUse(f, u)
		assert.NoError(t, err, f.Address)
	}
}

type downLinks struct{}

func (downLinks) LinkUp(string) (bool, error) { return false, nil }
