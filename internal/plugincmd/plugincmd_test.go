package plugincmd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parse(t *testing.T, args ...string) (*Common, string, error) {
	t.Helper()
	var c Common
	fs := flag.NewFlagSet("test-plugin", flag.ContinueOnError)
	c.Register(fs)
	var out bytes.Buffer
	err := Parse(fs, args, &out)
	return &c, out.String(), err
}

func TestParse(t *testing.T) {
	_, out, err := parse(t, "--help")
	require.True(t, errors.Is(err, ErrHelp))
	assert.Contains(t, out, "-device-plugin-dir")
	assert.Contains(t, out, "-wait-vfio-ready")

	c, _, err := parse(t, "--device-plugin-dir", "/x", "--wait-vfio-ready=false", "--pci-ids", "/p")
	require.NoError(t, err)
	assert.Equal(t, "/x", c.DevicePluginDir)
	assert.False(t, c.WaitReady)
	assert.Nil(t, c.Ready(), "no gate when waiting is off")

	_, _, err = parse(t, "--nope")
	require.Error(t, err)
	_, _, err = parse(t, "stray")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stray")

	c, _, err = parse(t)
	require.NoError(t, err)
	assert.Equal(t, "/var/lib/kubelet/device-plugins", c.DevicePluginDir)
	assert.True(t, c.WaitReady)
}

func TestReadyGateReadsTheVFIOManagersFile(t *testing.T) {
	dir := t.TempDir()
	c, _, err := parse(t, "--vfio-ready-file", filepath.Join(dir, "vfio-manager.ready"))
	require.NoError(t, err)
	ready := c.Ready()
	require.NotNil(t, ready)
	assert.False(t, ready(), "no file: not ready")
	require.NoError(t, os.WriteFile(c.ReadyFile, []byte(`{"ready":false}`), 0o644))
	assert.False(t, ready())
	require.NoError(t, os.WriteFile(c.ReadyFile, []byte("garbage"), 0o644))
	assert.False(t, ready())
	require.NoError(t, os.WriteFile(c.ReadyFile, []byte(`{"ready":true,"vfio":["0000:3b:00.0"]}`), 0o644))
	assert.True(t, ready())
}

func TestSimulatedHostIsBoundAndWatched(t *testing.T) {
	c, _, err := parse(t, "--simulate", "a10")
	require.NoError(t, err)
	h, cleanup, err := c.Host(context.Background())
	require.NoError(t, err)
	defer cleanup()
	f, err := h.ReadFunction("0000:3b:00.0")
	require.NoError(t, err)
	assert.Equal(t, "vfio-pci", f.Driver, "the demo host has its GPUs on vfio-pci")
	assert.False(t, c.WaitReady, "nothing to wait for on a simulated host")
	paths := c.WatchPaths(h)
	assert.Contains(t, paths, filepath.Join(h.DevRoot(), "vfio"))
	assert.Contains(t, paths, filepath.Join(h.SysfsRoot(), "bus", "pci", "drivers", "vfio-pci"))

	_, _, err = parse(t, "--simulate", "nope")
	require.NoError(t, err)
	c2, _, _ := parse(t, "--simulate", "nope")
	_, _, err = c2.Host(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nope")
}
