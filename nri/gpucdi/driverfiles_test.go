package gpucdi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuildDriverLibrariesAndBinaries(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	d := h.driver
	// Another driver version's libraries and links are left out.
	h.file(d, h.libDir+"/libnvidia-ptxjitcompiler.so.535.104.05")
	h.link(d, h.libDir+"/libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so.535.104.05")
	h.file(d, h.libDir+"/libnvidia-ptxjitcompiler.so."+testVersion+".bak")
	h.file(d, h.libDir+"/libfoo.so.1")
	h.link(d, h.libDir+"/libnvidia-dangling.so.1", "libnvidia-gone.so."+testVersion)
	// Merged /usr: /lib64 is /usr/lib64, searched once, mounted at /usr/lib64.
	h.link(d, "/lib64", "usr/lib64")
	h.file(d, h.lib64+"/libnvidia-nvvm.so."+testVersion)
	h.link(d, h.lib64+"/libnvidia-nvvm.so.4", "libnvidia-nvvm.so."+testVersion)
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

	spec, err := Build(twoGPUs(), h.opts())
	require.NoError(t, err)
	lib := func(dir, name, target string) string {
		return dir + "/" + name + " <- " + filepath.Join(d, target)
	}
	x86 := h.libDir
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
		got, err := resolveIn(root, in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := resolveIn(root, "/loop1")
	require.ErrorIs(t, err, errSymlinkLoop)
	_, err = resolveIn(root, "/lib/missing")
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestCharMajors(t *testing.T) {
	h := newFakeHost(t)
	m, err := charMajors(h.proc)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"mem": 1, "nvidia-frontend": 195, "nvidia-caps": 237, "nvidia-uvm": 508}, m)

	m, err = charMajors(filepath.Join(h.proc, "missing"))
	require.NoError(t, err)
	assert.Empty(t, m)
}
