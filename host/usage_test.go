package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

func inUse(t *testing.T, h *host.Host, s *host.Snapshot, addr string) []string {
	t.Helper()
	u, err := h.ScanUsage()
	require.NoError(t, err)
	reasons, err := h.InUse(fn(t, s, addr), u)
	require.NoError(t, err)
	return reasons
}

func TestInUseHostDriverNode(t *testing.T) {
	k, h := hostsim.NewHost(t, "gpu-in-use")
	s := scan(t, h)
	reasons := inUse(t, h, s, "0000:3b:00.0")
	require.Len(t, reasons, 1)
	assert.Contains(t, reasons[0], filepath.Join(h.DevRoot(), "nvidia0"))
	assert.Contains(t, reasons[0], "pid 4242")
	assert.Contains(t, reasons[0], "python3")
	assert.Empty(t, inUse(t, h, s, "0000:af:00.0"), "the second GPU is idle")

	u, err := h.ScanUsage()
	require.NoError(t, err)
	assert.Equal(t, []host.Holder{{PID: 4242, Comm: "python3"}}, u.Holders(filepath.Join(h.DevRoot(), "nvidia0")))
	assert.Equal(t, "pid 4242 (python3)", u.Holders(filepath.Join(h.DevRoot(), "nvidia0"))[0].String())

	require.NoError(t, k.Exit(4242))
	assert.Empty(t, inUse(t, h, s, "0000:3b:00.0"), "idle once the process exits")
}

func TestInUseUpInterface(t *testing.T) {
	k, h := hostsim.NewHost(t, "shared-nic")
	s := scan(t, h)
	reasons := inUse(t, h, s, "0000:18:00.0")
	require.Len(t, reasons, 1)
	assert.Contains(t, reasons[0], "ens1f0np0")
	assert.Empty(t, inUse(t, h, s, "0000:17:00.0"), "the GPU itself holds nothing")

	k.SetLinkUp("ens1f0np0", false)
	assert.Empty(t, inUse(t, h, s, "0000:18:00.0"))
}

type failingLinks struct{}

func (failingLinks) LinkUp(string) (bool, error) { return false, errors.New("netlink down") }

func TestInUseLinkError(t *testing.T) {
	k, _ := hostsim.NewHost(t, "shared-nic")
	o := k.Options()
	o.Links = failingLinks{}
	h := host.New(o)
	s := scan(t, h)
	u, err := h.ScanUsage()
	require.NoError(t, err)
	_, err = h.InUse(fn(t, s, "0000:18:00.0"), u)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "0000:18:00.0")
	assert.Contains(t, err.Error(), "netlink down")
}

func TestInUseHeldVFIOGroup(t *testing.T) {
	k, h := hostsim.NewHost(t, "workstation")
	for _, a := range k.Addresses() {
		require.NoError(t, unbindCurrent(h, a))
		require.NoError(t, h.SetDriverOverride(a, "vfio-pci"))
		require.NoError(t, h.Probe(a))
	}
	require.NoError(t, k.HoldOpen(777, "qemu-kvm", "vfio/1"))
	s := scan(t, h)
	for _, f := range s.Functions {
		assert.Equal(t, "vfio-pci", f.Driver)
		reasons, err := h.InUse(f, mustUsage(t, h))
		require.NoError(t, err)
		require.Len(t, reasons, 1, f.Address)
		assert.Contains(t, reasons[0], filepath.Join(h.DevRoot(), "vfio", "1"))
		assert.Contains(t, reasons[0], "qemu-kvm")
	}
}

func TestInUseClassDeviceNode(t *testing.T) {
	k, h := hostsim.NewHost(t, "workstation")
	s := scan(t, h)
	assert.Empty(t, inUse(t, h, s, "0000:01:00.1"))
	require.NoError(t, k.HoldOpen(1200, "pipewire", "snd/controlC0"))
	reasons := inUse(t, h, s, "0000:01:00.1")
	require.Len(t, reasons, 1)
	assert.Contains(t, reasons[0], filepath.Join(h.DevRoot(), "snd", "controlC0"))
	assert.Contains(t, reasons[0], "pipewire")
	assert.Empty(t, inUse(t, h, s, "0000:01:00.2"), "the USB function shares no node")
}

// A uevent DEVNAME that climbs out of /dev is ignored.
func TestInUseIgnoresEscapingDevName(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	dir, err := filepath.EvalSymlinks(filepath.Join(h.SysfsRoot(), "bus", "pci", "devices", "0000:3b:00.0"))
	require.NoError(t, err)
	testutil.WriteFile(t, filepath.Join(dir, "evil", "uevent"), "DEVNAME=../../etc/passwd\n")
	testutil.WriteFile(t, filepath.Join(dir, "abs", "uevent"), "DEVNAME=/etc/shadow\n")
	passwd := filepath.Join(k.Root(), "etc", "passwd")
	testutil.WriteFile(t, passwd, "")
	require.NoError(t, os.MkdirAll(filepath.Join(k.Root(), "proc", "99", "fd"), 0o755))
	require.NoError(t, os.Symlink(passwd, filepath.Join(k.Root(), "proc", "99", "fd", "3")))
	for _, r := range inUse(t, h, scan(t, h), "0000:3b:00.0") {
		assert.NotContains(t, r, "passwd")
		assert.NotContains(t, r, "shadow")
	}
}

func TestScanUsageSkipsOddEntries(t *testing.T) {
	root := t.TempDir()
	testutil.WriteFile(t, filepath.Join(root, "self"), "")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "0", "fd"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "10", "fd"), 0o755))
	require.NoError(t, os.Symlink("socket:[1234]", filepath.Join(root, "10", "fd", "3")))
	require.NoError(t, os.Symlink("/dev/../dev/nvidia1", filepath.Join(root, "10", "fd", "4")))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "11"), 0o755)) // exited: no fd dir
	h := host.New(host.Options{ProcRoot: root})
	u, err := h.ScanUsage()
	require.NoError(t, err)
	assert.Equal(t, []host.Holder{{PID: 10}}, u.Holders("/dev/nvidia1"))
	assert.Empty(t, u.Holders("socket:[1234]"))

	_, err = host.New(host.Options{ProcRoot: filepath.Join(root, "missing")}).ScanUsage()
	require.Error(t, err)
	assert.True(t, errors.Is(err, os.ErrNotExist))
}

func mustUsage(t *testing.T, h *host.Host) *host.Usage {
	t.Helper()
	u, err := h.ScanUsage()
	require.NoError(t, err)
	return u
}

// unbindCurrent unbinds a function from the driver it is on now.
func unbindCurrent(h *host.Host, a host.Address) error {
	f, err := h.ReadFunction(a)
	if err != nil {
		return err
	}
	return h.Unbind(a, f.Driver)
}
