package host

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A function whose sysfs entry goes while a scan reads it (a VF removed)
// is skipped; the PCI devices folder itself going is no such removal, so
// the scan fails and the discovery agent keeps the node's labels (CI saw
// a scan that had listed the folder before it went report no GPUs).
func TestVanishedIsOneFunctionNotTheFolder(t *testing.T) {
	h := New(Options{SysfsRoot: t.TempDir()})
	const addr = Address("0000:01:00.0")
	fn := filepath.Join(h.devicesDir(), string(addr))
	require.NoError(t, os.MkdirAll(fn, 0o755))
	assert.False(t, h.vanished(addr), "present")
	require.NoError(t, os.Remove(fn))
	assert.True(t, h.vanished(addr), "the function left")
	require.NoError(t, os.Rename(h.devicesDir(), h.devicesDir()+".gone"))
	assert.False(t, h.vanished(addr), "the folder went: not one function leaving")
}
