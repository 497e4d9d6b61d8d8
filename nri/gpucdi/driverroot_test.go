package gpucdi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

func TestBuildDriverLibrariesAndBinaries(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	d := h.driver
	// Another driver version's libraries and links are left out.
	h.library(h.libDir, "libnvidia-ptxjitcompiler.so.535.104.05", "libnvidia-ptxjitcompiler.so.1")
	h.file(d, h.libDir+"/libnvidia-ptxjitcompiler.so."+testVersion+".bak")
	h.file(d, h.libDir+"/libfoo.so.1")
	h.link(d, h.libDir+"/libnvidia-dangling.so.1", "libnvidia-gone.so."+testVersion)
	// Merged /usr: /lib64 is /usr/lib64, searched once, mounted at /usr/lib64.
	h.link(d, "/lib64", "usr/lib64")
	h.library(h.lib64, "libnvidia-nvvm.so."+testVersion, "libnvidia-nvvm.so.4")
	// A versioned name that is itself a link to the real file elsewhere.
	h.file(d, "/opt/nvidia/libnvidia-opencl.so."+testVersion)
	h.link(d, h.libDir+"/libnvidia-opencl.so."+testVersion, "../../../opt/nvidia/libnvidia-opencl.so."+testVersion)
	h.link(d, h.libDir+"/libnvidia-opencl.so.1", "libnvidia-opencl.so."+testVersion)
	// A link chain that leaves the root with ".." stays in it.
	h.link(d, h.libDir+"/libnvidia-cfg.so.1", "../../../../../../usr/lib/x86_64-linux-gnu/libnvidia-cfg.so."+testVersion)
	h.file(d, h.libDir+"/libnvidia-cfg.so."+testVersion)
	// A directory named like a library is not one.
	require.NoError(t, os.MkdirAll(filepath.Join(d, h.libDir, "libnvidia-dir.so."+testVersion), 0o755))
	// Binaries: the first folder that has one wins; nvidia-debugdump is absent.
	h.file(d, "/sbin/nvidia-persistenced")
	h.file(d, "/usr/sbin/nvidia-persistenced")

	spec := buildTwo(t, h.opts())
	lib := func(dir, name, target string) string {
		return dir + "/" + name + " <- " + filepath.Join(d, target)
	}
	x86, local := h.libDir, ContainerLibDir
	assert.Equal(t, []string{
		"/usr/bin/nvidia-smi <- " + filepath.Join(d, "/usr/bin/nvidia-smi"),
		lib(x86, "libcuda.so", x86+"/libcuda.so."+testVersion),
		lib(x86, "libcuda.so.1", x86+"/libcuda.so."+testVersion),
		lib(x86, "libcuda.so."+testVersion, x86+"/libcuda.so."+testVersion),
		lib(x86, "libnvidia-cfg.so.1", x86+"/libnvidia-cfg.so."+testVersion),
		lib(x86, "libnvidia-cfg.so."+testVersion, x86+"/libnvidia-cfg.so."+testVersion),
		lib(x86, "libnvidia-ml.so.1", x86+"/libnvidia-ml.so."+testVersion),
		lib(x86, "libnvidia-ml.so."+testVersion, x86+"/libnvidia-ml.so."+testVersion),
		lib(x86, "libnvidia-opencl.so.1", "/opt/nvidia/libnvidia-opencl.so."+testVersion),
		lib(x86, "libnvidia-opencl.so."+testVersion, "/opt/nvidia/libnvidia-opencl.so."+testVersion),
		lib(h.lib64, "libnvidia-nvvm.so.4", h.lib64+"/libnvidia-nvvm.so."+testVersion),
		lib(h.lib64, "libnvidia-nvvm.so."+testVersion, h.lib64+"/libnvidia-nvvm.so."+testVersion),
		// Each again, by name, in the folder nvidia/cuda images search.
		lib(local, "libcuda.so", x86+"/libcuda.so."+testVersion),
		lib(local, "libcuda.so.1", x86+"/libcuda.so."+testVersion),
		lib(local, "libcuda.so."+testVersion, x86+"/libcuda.so."+testVersion),
		lib(local, "libnvidia-cfg.so.1", x86+"/libnvidia-cfg.so."+testVersion),
		lib(local, "libnvidia-cfg.so."+testVersion, x86+"/libnvidia-cfg.so."+testVersion),
		lib(local, "libnvidia-ml.so.1", x86+"/libnvidia-ml.so."+testVersion),
		lib(local, "libnvidia-ml.so."+testVersion, x86+"/libnvidia-ml.so."+testVersion),
		lib(local, "libnvidia-nvvm.so.4", h.lib64+"/libnvidia-nvvm.so."+testVersion),
		lib(local, "libnvidia-nvvm.so."+testVersion, h.lib64+"/libnvidia-nvvm.so."+testVersion),
		lib(local, "libnvidia-opencl.so.1", "/opt/nvidia/libnvidia-opencl.so."+testVersion),
		lib(local, "libnvidia-opencl.so."+testVersion, "/opt/nvidia/libnvidia-opencl.so."+testVersion),
		"/usr/sbin/nvidia-persistenced <- " + filepath.Join(d, "/usr/sbin/nvidia-persistenced"),
	}, mountSummary(spec.ContainerEdits.Mounts))
	for _, m := range spec.ContainerEdits.Mounts {
		assert.Equal(t, []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}, m.Options, m.ContainerPath)
	}
}

func TestBuildOtherDriverVersionIsNotMounted(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	inv := twoGPUs()
	inv.DriverVersion = "535.104.05"
	_, err := Build(inv, h.opts())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "libcuda.so.535.104.05 not found under driver root "+h.driver)

	h.file(h.driver, "/usr/lib64/libcuda.so.535.104.05")
	spec, err := Build(inv, h.opts())
	require.NoError(t, err)
	assert.Equal(t, []string{
		"/usr/bin/nvidia-smi <- " + filepath.Join(h.driver, "/usr/bin/nvidia-smi"),
		"/usr/lib64/libcuda.so.535.104.05 <- " + filepath.Join(h.driver, "/usr/lib64/libcuda.so.535.104.05"),
		ContainerLibDir + "/libcuda.so.535.104.05 <- " + filepath.Join(h.driver, "/usr/lib64/libcuda.so.535.104.05"),
	}, mountSummary(spec.ContainerEdits.Mounts), "none of the "+testVersion+" libraries")

	inv.DriverVersion = ""
	_, err = Build(inv, h.opts())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `driver version ""`)
}

func TestBuildBrokenLibraryFolder(t *testing.T) {
	h := newFakeHost(t, 0)
	h.link(h.driver, "/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu")
	_, err := Build(Inventory{DriverVersion: testVersion, GPUs: []GPU{{}}}, h.opts())
	require.ErrorIs(t, err, errSymlinkLoop)
	assert.Contains(t, err.Error(), "driver folder /lib/aarch64-linux-gnu under "+h.driver)
}

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	h := &fakeHost{t: t}
	h.file(root, "/usr/lib/a")
	h.link(root, "/lib", "usr/lib")
	h.link(root, "/abs", "/usr/lib/a")
	h.link(root, "/up", "../../../usr/lib/a")
	h.link(root, "/loop1", "loop2")
	h.link(root, "/loop2", "/loop1")
	for in, want := range map[string]string{
		"/lib/a": "/usr/lib/a", "/abs": "/usr/lib/a", "/up": "/usr/lib/a",
		"/lib/../lib/./a": "/usr/lib/a", "/": "/", "../..": "/",
	} {
		got, err := driverRoot(root).resolve(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := driverRoot(root).resolve("/loop1")
	require.ErrorIs(t, err, errSymlinkLoop)
	_, err = driverRoot(root).resolve("/lib/missing")
	require.ErrorIs(t, err, os.ErrNotExist)
}

// mountsTo is the mounts of spec whose host path is target (inside the
// driver root), by container path.
func mountsTo(h *fakeHost, spec *cdispec.Spec, target string) []string {
	var out []string
	suffix := " <- " + filepath.Join(h.driver, target)
	for _, m := range mountSummary(spec.ContainerEdits.Mounts) {
		if rest, ok := strings.CutSuffix(m, suffix); ok {
			out = append(out, rest)
		}
	}
	return out
}

func TestBuildLibrariesAlsoInContainerLibDir(t *testing.T) {
	// A RHEL host: an Ubuntu image's loader never searches /usr/lib64, an
	// nvidia/cuda image's LD_LIBRARY_PATH has /usr/local/nvidia/lib64.
	h := newBareHost(t, 0)
	cuda := h.library("/usr/lib64", "libcuda.so."+testVersion, "libcuda.so.1", "libcuda.so")
	assert.Equal(t, []string{
		"/usr/lib64/libcuda.so", "/usr/lib64/libcuda.so.1", cuda,
		"/usr/local/nvidia/lib64/libcuda.so", "/usr/local/nvidia/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so." + testVersion,
	}, mountsTo(h, buildTwo(t, h.opts()), cuda), "at the host's path and in /usr/local/nvidia/lib64, links as the real file")
}

func TestBuildContainerLibDirOncePerName(t *testing.T) {
	h := newFakeHost(t, 0)
	// The same names in a later folder: the first folder's files win.
	other := h.library("/usr/lib64", "libcuda.so."+testVersion, "libcuda.so.1")
	// A searched /usr/local/nvidia/lib64 keeps its own file.
	own := ContainerLibDir + "/libnvidia-ml.so." + testVersion
	h.file(h.driver, own)
	o := h.opts()
	o.LibDirs = []string{h.libDir, "/usr/lib64", ContainerLibDir}
	spec := buildTwo(t, o)
	assert.Equal(t, []string{"/usr/lib64/libcuda.so.1", other}, mountsTo(h, spec, other))
	assert.Contains(t, mountsTo(h, spec, h.libDir+"/libcuda.so."+testVersion), ContainerLibDir+"/libcuda.so.1")
	assert.Equal(t, []string{own}, mountsTo(h, spec, own))
	assert.Equal(t, []string{h.libDir + "/libnvidia-ml.so.1", h.libDir + "/libnvidia-ml.so." + testVersion, ContainerLibDir + "/libnvidia-ml.so.1"},
		mountsTo(h, spec, h.libDir+"/libnvidia-ml.so."+testVersion))
	seen := map[string]bool{}
	for _, m := range spec.ContainerEdits.Mounts {
		assert.False(t, seen[m.ContainerPath], "%s mounted twice", m.ContainerPath)
		seen[m.ContainerPath] = true
	}
}

func TestBuildDebianNvidiaCurrent(t *testing.T) {
	// Debian's driver packages: the libraries in nvidia/current, the SONAME
	// links in the multiarch folder through /etc/alternatives.
	h := newBareHost(t, 0)
	x86, current := h.libDir, h.libDir+"/nvidia/current"
	cuda := h.library(current, "libcuda.so."+testVersion, "libcuda.so.1")
	h.link(h.driver, "/etc/alternatives/nvidia--libcuda.so.1-x86_64-linux-gnu", current+"/libcuda.so.1")
	h.link(h.driver, x86+"/libcuda.so.1", "/etc/alternatives/nvidia--libcuda.so.1-x86_64-linux-gnu")
	h.link(h.driver, x86+"/libcuda.so", "libcuda.so.1")
	assert.Equal(t, []string{
		x86 + "/libcuda.so", x86 + "/libcuda.so.1", current + "/libcuda.so.1", cuda,
		ContainerLibDir + "/libcuda.so", ContainerLibDir + "/libcuda.so.1", ContainerLibDir + "/libcuda.so." + testVersion,
	}, mountsTo(h, buildTwo(t, h.opts()), cuda), "links of an earlier folder into a later one are kept")
}

func TestBuildLib64Nvidia(t *testing.T) {
	h := newBareHost(t, 0)
	cuda := h.library("/usr/lib64/nvidia", "libcuda.so."+testVersion)
	h.link(h.driver, "/usr/lib64/libcuda.so.1", "nvidia/libcuda.so."+testVersion)
	assert.Equal(t, []string{
		"/usr/lib64/libcuda.so.1", cuda,
		ContainerLibDir + "/libcuda.so.1", ContainerLibDir + "/libcuda.so." + testVersion,
	}, mountsTo(h, buildTwo(t, h.opts()), cuda))
}

func TestBuildLegacyNVVM(t *testing.T) {
	// R575+: libnvidia-nvvm70.so.4 carries no driver version.
	h := newFakeHost(t, 0)
	nvvm70 := h.library(h.libDir, "libnvidia-nvvm70.so.4", "libnvidia-nvvm70.so")
	h.file(h.driver, h.libDir+"/libnvidia-nvvm71.so.4") // not the legacy library
	spec := buildTwo(t, h.opts())
	assert.Equal(t, []string{
		h.libDir + "/libnvidia-nvvm70.so", nvvm70,
		ContainerLibDir + "/libnvidia-nvvm70.so", ContainerLibDir + "/libnvidia-nvvm70.so.4",
	}, mountsTo(h, spec, nvvm70))
	assert.Empty(t, mountsTo(h, spec, h.libDir+"/libnvidia-nvvm71.so.4"))
}

func TestDefaultLibDirs(t *testing.T) {
	dirs := DefaultLibDirs()
	for _, d := range []string{
		"/usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/nvidia/current", "/lib/x86_64-linux-gnu",
		"/usr/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu/nvidia/current", "/lib/aarch64-linux-gnu",
		"/usr/lib64", "/usr/lib64/nvidia", "/lib64",
	} {
		assert.Contains(t, dirs, d)
	}
}
