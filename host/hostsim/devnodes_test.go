package hostsim_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// nodeKind says what a device node of the simulated tree is: "null" for a
// character device with /dev/null's numbers, "file" for an empty regular file.
func nodeKind(t *testing.T, p string) string {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(p, &st), "lstat %s", p)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFCHR:
		if st.Rdev == 1<<8|3 {
			return "null"
		}
		return "char"
	case syscall.S_IFREG:
		if st.Size == 0 {
			return "file"
		}
	}
	return "other"
}

// TestCharDevices: with CharDevices the kernel's device nodes are character devices with
// /dev/null's numbers, made and removed where the kernel makes and removes them; without it they
// stay empty files.
func TestCharDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.MissingPeer(t, "root: mknod needs CAP_MKNOD")
	}
	fx, err := hostsim.Lookup("a10")
	require.NoError(t, err)
	k, err := fx.Build(t.TempDir(), hostsim.CharDevices())
	require.NoError(t, err)
	h := host.New(k.Options())
	a := host.Address("0000:3b:00.0")
	dev := filepath.Join(k.Root(), "dev")
	assert.Equal(t, "null", nodeKind(t, filepath.Join(dev, "vfio", "vfio")))
	assert.Equal(t, "null", nodeKind(t, filepath.Join(dev, "nvidia0")))
	assert.NoFileExists(t, vfioNode(k, "12"))

	toVFIO(t, h, a)
	assert.Equal(t, "vfio-pci", k.DriverOf(a))
	assert.Equal(t, "null", nodeKind(t, vfioNode(k, "12")), "the group node vfio-pci's bind makes")
	require.NoError(t, k.EnableIOMMUFD())
	assert.Equal(t, "null", nodeKind(t, filepath.Join(dev, "iommu")))
	assert.Equal(t, "null", nodeKind(t, filepath.Join(dev, "vfio", "devices", "vfio0")))

	require.NoError(t, unbindCurrent(h, a))
	_, err = os.Lstat(vfioNode(k, "12"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the group node goes with the last vfio member")
}

// TestDeviceNodesAreFilesByDefault: the default tree needs no privileges.
func TestDeviceNodesAreFilesByDefault(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	assert.Equal(t, "file", nodeKind(t, filepath.Join(k.Root(), "dev", "vfio", "vfio")))
	assert.Equal(t, "file", nodeKind(t, filepath.Join(k.Root(), "dev", "nvidia0")))
	toVFIO(t, h, "0000:3b:00.0")
	assert.Equal(t, "file", nodeKind(t, vfioNode(k, "12")))
}
