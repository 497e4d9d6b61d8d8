package plugincmd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

// parse runs a plugin program whose run only records what it got.
func parse(t *testing.T, args ...string) (*Common, *host.Host, int, string) {
	t.Helper()
	var c Common
	var got *host.Host
	p := &shell.Program{Name: "test-plugin", Summary: "tests.", Commands: []*shell.Command{
		Command(&c, nil, func(_ context.Context, _ *shell.Env, h *host.Host) error { got = h; return nil })}}
	var out bytes.Buffer
	code := shell.Run(context.Background(), p, args, shell.IO{Stdout: &out, Stderr: &out})
	return &c, got, code, out.String()
}

func TestFlags(t *testing.T) {
	_, _, code, out := parse(t, "--help")
	require.Equal(t, 0, code)
	for _, f := range []string{"-device-plugin-dir", "-wait-vfio-ready", "-sysfs-root", "-health-addr", "-pci-ids"} {
		assert.Contains(t, out, f)
	}
	c, h, code, out := parse(t, "--device-plugin-dir", "/x", "--wait-vfio-ready=false", "--pci-ids", "/p", "--sysfs-root", "/s", "--modules-dir", "/m")
	require.Equal(t, 0, code, out)
	assert.Equal(t, "/x", c.DevicePluginDir)
	assert.False(t, c.WaitReady)
	assert.Nil(t, c.Ready(), "no gate when waiting is off")
	assert.Equal(t, "/s", h.SysfsRoot())
	dir, err := h.ModulesDir()
	require.NoError(t, err)
	assert.Equal(t, "/m", dir)

	_, _, code, _ = parse(t, "--nope")
	assert.Equal(t, 1, code)
	_, _, code, out = parse(t, "stray")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "stray")

	c, _, code, _ = parse(t)
	require.Equal(t, 0, code)
	assert.Equal(t, "/var/lib/kubelet/device-plugins", c.DevicePluginDir)
	assert.Equal(t, "/run/sandbox-gpu/vfio-manager/vfio-manager.ready", c.ReadyFile)
	assert.True(t, c.WaitReady)
}

func TestReadyGateReadsTheVFIOManagersFile(t *testing.T) {
	dir := t.TempDir()
	c, _, code, _ := parse(t, "--vfio-ready-file", filepath.Join(dir, "vfio-manager.ready"))
	require.Equal(t, 0, code)
	ready := c.Ready()
	require.NotNil(t, ready)
	assert.False(t, ready(), "no file: not ready")
	require.NoError(t, os.WriteFile(c.ReadyFile, []byte(`{"ready":false}`), 0o644))
	assert.False(t, ready())
	require.NoError(t, os.WriteFile(c.ReadyFile, []byte("garbage"), 0o644))
	assert.False(t, ready())
	live := fmt.Sprintf(`{"ready":true,"vfio":["0000:3b:00.0"],"expires":%q}`, time.Now().Add(time.Hour).Format(time.RFC3339Nano))
	require.NoError(t, os.WriteFile(c.ReadyFile, []byte(live), 0o644))
	assert.True(t, ready())
	dead := fmt.Sprintf(`{"ready":true,"vfio":["0000:3b:00.0"],"expires":%q}`, time.Now().Add(-time.Second).Format(time.RFC3339Nano))
	require.NoError(t, os.WriteFile(c.ReadyFile, []byte(dead), 0o644))
	assert.False(t, ready(), "a killed VFIO manager's file (heartbeat run out) is not ready")
}

// TestWatchPathsComeFromTheHostModel: the device folders are the host
// model's; the readiness file's folder is added while waiting for it.
func TestWatchPathsComeFromTheHostModel(t *testing.T) {
	k, h := hostsim.NewHost(t, "gh200")
	c := &Common{WaitReady: true, ReadyFile: "/run/x/vfio-manager.ready"}
	paths := c.WatchPaths(h)
	root := k.Root()
	assert.Contains(t, paths, filepath.Join(root, "dev", "vfio"))
	assert.Contains(t, paths, filepath.Join(root, "sys", "bus", "pci", "drivers", "vfio-pci"))
	assert.Contains(t, paths, filepath.Join(root, "sys", "bus", "mdev", "devices"))
	assert.Contains(t, paths, "/run/x")
	c.WaitReady = false
	assert.NotContains(t, c.WatchPaths(h), "/run/x")
}
