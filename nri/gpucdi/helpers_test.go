package gpucdi

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const testVersion = "550.54.15"

// fakeHost is a node's /dev, driver root and /proc under a test folder.
type fakeHost struct {
	t                  *testing.T
	dev, driver, proc  string
	libDir, lib64, bin string // inside driver
}

// newFakeHost makes a host with the driver's libcuda and libnvidia-ml of
// testVersion and their links, nvidia-smi, and the given GPU minors' nodes.
func newFakeHost(t *testing.T, minors ...int) *fakeHost {
	t.Helper()
	h := newBareHost(t, minors...)
	h.library(h.libDir, "libcuda.so."+testVersion, "libcuda.so.1", "libcuda.so")
	h.file(h.driver, h.libDir+"/libnvidia-ml.so."+testVersion)
	h.link(h.driver, h.libDir+"/libnvidia-ml.so.1", h.libDir+"/libnvidia-ml.so."+testVersion) // absolute
	h.file(h.driver, h.bin+"/nvidia-smi")
	return h
}

// newBareHost makes a host with the given GPU minors' nodes, nvidia-uvm
// (508) and nvidia-caps (237) in <proc>/devices, and no driver files.
func newBareHost(t *testing.T, minors ...int) *fakeHost {
	t.Helper()
	root := t.TempDir()
	h := &fakeHost{
		t: t, dev: filepath.Join(root, "dev"), driver: filepath.Join(root, "driver"), proc: filepath.Join(root, "proc"),
		libDir: "/usr/lib/x86_64-linux-gnu", lib64: "/usr/lib64", bin: "/usr/bin",
	}
	for _, m := range minors {
		h.file(h.dev, "nvidia"+strconv.Itoa(m))
	}
	require.NoError(t, os.MkdirAll(h.driver, 0o755))
	h.write(h.proc, "devices", "Character devices:\n  1 mem\n195 nvidia-frontend\n237 nvidia-caps\n508 nvidia-uvm\n\nBlock devices:\n  9 nvidia-uvm\n259 blkext\n")
	return h
}

func (h *fakeHost) opts() Options {
	return Options{DevRoot: h.dev, DriverRoot: h.driver, ProcRoot: h.proc}
}

func (h *fakeHost) file(root, rel string) {
	h.write(root, rel, "x")
}

func (h *fakeHost) write(root, rel, content string) {
	h.t.Helper()
	testutil.WriteFile(h.t, filepath.Join(root, rel), content)
}

func (h *fakeHost) link(root, rel, target string) {
	h.t.Helper()
	testutil.Symlink(h.t, target, filepath.Join(root, rel))
}

// library makes the driver's library dir/name and a chain of links to it
// in dir, each to the one before (libcuda.so.1 to libcuda.so.<version>,
// libcuda.so to libcuda.so.1); it returns dir/name.
func (h *fakeHost) library(dir, name string, links ...string) string {
	h.t.Helper()
	h.file(h.driver, dir+"/"+name)
	target := name
	for _, l := range links {
		h.link(h.driver, dir+"/"+l, target)
		target = l
	}
	return dir + "/" + name
}

// device returns the spec's device called name, failing when missing.
func device(t *testing.T, spec *cdispec.Spec, name string) cdispec.Device {
	t.Helper()
	for _, d := range spec.Devices {
		if d.Name == name {
			return d
		}
	}
	require.Failf(t, "no device", "%q", name)
	return cdispec.Device{}
}

func deviceNames(spec *cdispec.Spec) []string {
	var out []string
	for _, d := range spec.Devices {
		out = append(out, d.Name)
	}
	return out
}

// nodeSummary is "path hostPath type major:minor" of each node.
func nodeSummary(nodes []*cdispec.DeviceNode) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.Path+" "+n.HostPath+" "+n.Type+" "+itoa64(n.Major)+":"+itoa64(n.Minor))
	}
	return out
}

// mountSummary is "containerPath <- hostPath" of each mount.
func mountSummary(mounts []*cdispec.Mount) []string {
	var out []string
	for _, m := range mounts {
		out = append(out, m.ContainerPath+" <- "+m.HostPath)
	}
	return out
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
