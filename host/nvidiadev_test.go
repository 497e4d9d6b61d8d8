package host_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// nvidiaTree is a fake dev and proc root under a test folder.
type nvidiaTree struct {
	t         *testing.T
	dev, proc string
}

func newNvidiaTree(t *testing.T) *nvidiaTree {
	root := t.TempDir()
	return &nvidiaTree{t: t, dev: filepath.Join(root, "dev"), proc: filepath.Join(root, "proc")}
}

func (n *nvidiaTree) host() *host.Host {
	return host.New(host.Options{SysfsRoot: filepath.Join(filepath.Dir(n.dev), "sys"), DevRoot: n.dev, ProcRoot: n.proc})
}

func (n *nvidiaTree) write(root, rel, content string) {
	n.t.Helper()
	testutil.WriteFile(n.t, filepath.Join(root, rel), content)
}

func (n *nvidiaTree) link(root, rel, target string) {
	n.t.Helper()
	testutil.Symlink(n.t, target, filepath.Join(root, rel))
}

func TestDevNode(t *testing.T) {
	n := newNvidiaTree(t)
	n.link(n.dev, "nvidia0", "/dev/null") // a real character device: 1:3
	n.write(n.dev, "nvidia-caps/nvidia-cap30", "")
	n.link(n.dev, "nvidia-modeset", "nowhere")
	h := n.host()

	for _, c := range []struct {
		name string
		want host.DevNode
	}{
		{"nvidia0", host.DevNode{Path: filepath.Join(n.dev, "nvidia0"), Exists: true, Char: true, Major: 1, Minor: 3}},
		{"nvidia-caps/nvidia-cap30", host.DevNode{Path: filepath.Join(n.dev, "nvidia-caps", "nvidia-cap30"), Exists: true}},
		{"nvidia-modeset", host.DevNode{Path: filepath.Join(n.dev, "nvidia-modeset"), Exists: true}}, // dangling link
		{"nvidia-uvm", host.DevNode{Path: filepath.Join(n.dev, "nvidia-uvm")}},
	} {
		got, err := h.DevNode(c.name)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	for _, bad := range []string{"", "../etc/passwd", "/dev/null", "a/../../b"} {
		_, err := h.DevNode(bad)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), n.dev, "names the dev root")
	}
}

func TestCharMajors(t *testing.T) {
	n := newNvidiaTree(t)
	h := n.host()
	m, err := h.CharMajors()
	require.NoError(t, err, "a missing <proc>/devices gives none")
	assert.Empty(t, m)

	n.write(n.proc, "devices", "Character devices:\n  1 mem\n195 nvidia-frontend\n237 nvidia-caps\n508 nvidia-uvm\n\nBlock devices:\n  9 nvidia-uvm\n259 blkext\n")
	m, err = h.CharMajors()
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"mem": 1, "nvidia-frontend": 195, "nvidia-caps": 237, "nvidia-uvm": 508}, m,
		"character devices only: block majors of the same name do not count")

	require.NoError(t, os.Remove(filepath.Join(n.proc, "devices")))
	require.NoError(t, os.Mkdir(filepath.Join(n.proc, "devices"), 0o755))
	_, err = h.CharMajors()
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(n.proc, "devices"))
}

func TestMIGCaps(t *testing.T) {
	n := newNvidiaTree(t)
	n.write(n.proc, "driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\ngpu3/gi1/access 30\ngpu3/gi1/ci0/access 31\n")
	n.write(n.proc, "driver/nvidia/capabilities/gpu3/mig/gi2/access", "DeviceFileMinor: 39\nDeviceFileMode: 292\n")
	n.write(n.proc, "driver/nvidia/capabilities/gpu3/mig/gi2/ci0/access", "DeviceFileMode: 292\n")
	n.write(n.proc, "driver/nvidia/capabilities/gpu3/mig/gi3/access", "DeviceFileMinor: x\n")
	caps, err := n.host().MIGCaps()
	require.NoError(t, err)

	for id, want := range map[string]int64{"gpu3/gi1/access": 30, "gpu3/gi1/ci0/access": 31, "gpu3/gi2/access": 39} {
		got, err := caps.Minor(id)
		require.NoError(t, err, id)
		assert.Equal(t, want, got, id)
	}
	for id, msg := range map[string]string{
		"gpu3/gi2/ci0/access": "no DeviceFileMinor in " + filepath.Join(n.proc, "driver/nvidia/capabilities/gpu3/mig/gi2/ci0/access"),
		"gpu3/gi3/access":     filepath.Join(n.proc, "driver/nvidia/capabilities/gpu3/mig/gi3/access"),
		"gpu3/gi9/access":     "not in mig-minors",
		"gpu3/../../x":        "not gpu<minor>",
		"access":              "not gpu<minor>",
	} {
		_, err := caps.Minor(id)
		require.Error(t, err, id)
		assert.Contains(t, err.Error(), msg, id)
	}
}

func TestMIGCapsWithoutMigMinors(t *testing.T) {
	n := newNvidiaTree(t)
	n.write(n.proc, "driver/nvidia/capabilities/gpu0/mig/gi1/access", "DeviceFileMinor: 12\n")
	caps, err := n.host().MIGCaps()
	require.NoError(t, err, "a missing mig-minors is no error")
	got, err := caps.Minor("gpu0/gi1/access")
	require.NoError(t, err)
	assert.Equal(t, int64(12), got)

	require.NoError(t, os.MkdirAll(filepath.Join(n.proc, "driver/nvidia-caps/mig-minors"), 0o755))
	_, err = n.host().MIGCaps()
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(n.proc, "driver/nvidia-caps/mig-minors"))
}
