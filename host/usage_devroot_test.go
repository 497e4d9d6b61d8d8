package host

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A node daemon sees the host's /dev under another root (/host/dev) while
// /proc shows the holders' own paths (/dev/vfio/12): InUse must still find
// them, by /dev path and by device number.
func TestInUseWithDevRootMountedElsewhere(t *testing.T) {
	root := t.TempDir()
	dev, proc := filepath.Join(root, "host", "dev"), filepath.Join(root, "proc")
	require.NoError(t, os.MkdirAll(filepath.Join(dev, "vfio"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dev, "vfio", "12"), nil, 0o600))
	// /dev/nvidia0 on this "host" is a real character device (/dev/null's numbers).
	require.NoError(t, os.Symlink("/dev/null", filepath.Join(dev, "nvidia0")))
	fakeProc := func(pid, comm, target string) {
		require.NoError(t, os.MkdirAll(filepath.Join(proc, pid, "fd"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(proc, pid, "comm"), []byte(comm+"\n"), 0o644))
		require.NoError(t, os.Symlink(target, filepath.Join(proc, pid, "fd", "3")))
	}
	fakeProc("100", "qemu-kvm", "/dev/vfio/12")
	fakeProc("200", "python3", "/dev/null") // same device number as the host's nvidia0

	h := New(Options{SysfsRoot: filepath.Join(root, "sys"), DevRoot: dev, ProcRoot: proc})
	u, err := h.ScanUsage()
	require.NoError(t, err)

	vm := &Function{Address: "0000:3b:00.0", IOMMUGroup: 12, Driver: "vfio-pci"}
	reasons, err := h.InUse(vm, u)
	require.NoError(t, err)
	require.Len(t, reasons, 1)
	assert.Contains(t, reasons[0], "qemu-kvm")

	gpuProc := filepath.Join(proc, "driver", "nvidia", "gpus", "0000:af:00.0")
	require.NoError(t, os.MkdirAll(gpuProc, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(gpuProc, "information"), []byte("Device Minor: \t 0\n"), 0o644))
	gpu := &Function{Address: "0000:af:00.0", IOMMUGroup: 60, Driver: "nvidia"}
	reasons, err = h.InUse(gpu, u)
	require.NoError(t, err)
	require.Len(t, reasons, 1, "matched by device number")
	assert.Contains(t, reasons[0], "python3")

	idle := &Function{Address: "0000:5d:00.0", IOMMUGroup: 13, Driver: "vfio-pci"}
	reasons, err = h.InUse(idle, u)
	require.NoError(t, err)
	assert.Empty(t, reasons)
}

// The scanning process itself (proc's "self") is never a holder: it claims
// the VFIO group while unbinding.
func TestScanUsageSkipsSelf(t *testing.T) {
	root := t.TempDir()
	proc := filepath.Join(root, "proc")
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "77", "fd"), 0o755))
	require.NoError(t, os.Symlink("/dev/vfio/4", filepath.Join(proc, "77", "fd", "5")))
	h := New(Options{SysfsRoot: filepath.Join(root, "sys"), DevRoot: "/dev", ProcRoot: proc})
	u, err := h.ScanUsage()
	require.NoError(t, err)
	assert.Len(t, u.Holders("/dev/vfio/4"), 1)

	require.NoError(t, os.Symlink("77", filepath.Join(proc, "self")))
	u, err = h.ScanUsage()
	require.NoError(t, err)
	assert.Empty(t, u.Holders("/dev/vfio/4"))
}
