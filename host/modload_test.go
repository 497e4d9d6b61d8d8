package host_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// fakeKernel records what a ModuleLoader hands the kernel: the module
// named by the image ("\x7fELF NAME"), finit_module's flags, and answers
// with errs[name] (nil: loaded).
type fakeKernel struct {
	mu    sync.Mutex
	calls []string // "finit NAME FLAGS" or "init NAME"
	errs  map[string]error
}

func (k *fakeKernel) record(kind string, image []byte, flags string) error {
	name := strings.TrimPrefix(string(image), "\x7fELF ")
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, strings.TrimSpace(kind+" "+name+" "+flags))
	return k.errs[name]
}

func (k *fakeKernel) FinitModule(f *os.File, flags int) error {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return err
	}
	if flags != 0 {
		return k.record("finit-compressed", []byte(filepath.Base(f.Name())), "")
	}
	return k.record("finit", b, "")
}

func (k *fakeKernel) InitModule(image []byte) error { return k.record("init", image, "") }

// modTree is a fixture modules folder and sysfs root.
type modTree struct {
	dir, sysfs string
	k          *fakeKernel
}

func newModTree(t *testing.T, dep string) *modTree {
	t.Helper()
	root := t.TempDir()
	m := &modTree{dir: filepath.Join(root, "lib", "modules", "6.1.0-test"), sysfs: filepath.Join(root, "sys"),
		k: &fakeKernel{errs: map[string]error{}}}
	testutil.WriteFile(t, filepath.Join(m.dir, "modules.dep"), dep)
	require.NoError(t, os.MkdirAll(filepath.Join(m.sysfs, "module"), 0o755))
	return m
}

// module writes a module file whose image is "\x7fELF NAME", compressed
// as its suffix says.
func (m *modTree) module(t *testing.T, rel string) {
	t.Helper()
	name := filepath.Base(rel)
	name = name[:strings.Index(name, ".ko")]
	image := []byte("\x7fELF " + name)
	var b bytes.Buffer
	switch {
	case strings.HasSuffix(rel, ".xz"):
		w, err := xz.NewWriter(&b)
		require.NoError(t, err)
		_, err = w.Write(image)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	case strings.HasSuffix(rel, ".zst"):
		w, err := zstd.NewWriter(&b)
		require.NoError(t, err)
		_, err = w.Write(image)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	case strings.HasSuffix(rel, ".gz"):
		w := gzip.NewWriter(&b)
		_, err := w.Write(image)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	default:
		b.Write(image)
	}
	testutil.WriteFile(t, filepath.Join(m.dir, rel), b.String())
}

func (m *modTree) load(module string) error {
	return host.NewModuleLoader(m.dir, m.sysfs, m.k).Load(context.Background(), module)
}

// A module loads after what it needs, each once, in modules.dep's order of
// dependencies; names with dashes or underscores are one module.
func TestModuleLoaderDependencyChain(t *testing.T) {
	m := newModTree(t, strings.Join([]string{
		"kernel/drivers/vfio/pci/vfio-pci.ko: kernel/drivers/vfio/pci/vfio-pci-core.ko kernel/virt/lib/irqbypass.ko kernel/drivers/vfio/vfio.ko",
		"kernel/drivers/vfio/pci/vfio-pci-core.ko: kernel/virt/lib/irqbypass.ko kernel/drivers/vfio/vfio.ko",
		"kernel/virt/lib/irqbypass.ko:",
		"kernel/drivers/vfio/vfio.ko:",
		"kernel/drivers/vfio/vfio_iommu_type1.ko: kernel/drivers/vfio/vfio.ko",
	}, "\n")+"\n")
	for _, f := range []string{"kernel/drivers/vfio/pci/vfio-pci.ko", "kernel/drivers/vfio/pci/vfio-pci-core.ko",
		"kernel/virt/lib/irqbypass.ko", "kernel/drivers/vfio/vfio.ko", "kernel/drivers/vfio/vfio_iommu_type1.ko"} {
		m.module(t, f)
	}
	testutil.WriteFile(t, filepath.Join(m.dir, "modules.softdep"), "# Soft dependencies extracted from modules themselves.\n"+
		"softdep vfio post: vfio_iommu_type1 vfio_iommu_spapr_tce\n")
	require.NoError(t, m.load("vfio-pci"))
	assert.Equal(t, []string{"finit irqbypass", "finit vfio", "finit vfio_iommu_type1", "finit vfio-pci-core", "finit vfio-pci"}, m.k.calls,
		"dependencies first; vfio's post softdep right after it; the missing spapr softdep skipped")

	// Already loaded (sysfs shows it): nothing more; EEXIST (loaded
	// meanwhile) counts as loaded.
	m.k.calls = nil
	testutil.WriteFile(t, filepath.Join(m.sysfs, "module", "vfio_pci", "initstate"), "live\n")
	require.NoError(t, m.load("vfio_pci"))
	assert.Empty(t, m.k.calls)
	m.k.errs["vfio"] = unix.EEXIST
	require.NoError(t, m.load("vfio_iommu_type1"))
	assert.Equal(t, []string{"finit vfio", "finit vfio_iommu_type1"}, m.k.calls)

	// A kernel error names the module and its file.
	m.k.calls, m.k.errs["vfio"] = nil, unix.ENOEXEC
	err := m.load("vfio-pci-core")
	require.ErrorIs(t, err, unix.ENOEXEC)
	assert.Contains(t, err.Error(), "vfio")
	assert.Contains(t, err.Error(), filepath.Join(m.dir, "kernel/drivers/vfio/vfio.ko"))
	assert.Equal(t, []string{"finit irqbypass", "finit vfio"}, m.k.calls, "nothing after the failed dependency")
}

// Compressed modules: decompressed here for init_module when the kernel
// has no decompressor of that kind; handed to finit_module with
// MODULE_INIT_COMPRESSED_FILE when it has (sys/module/compression), and
// decompressed here after all when that kernel refuses the flag.
func TestModuleLoaderCompressed(t *testing.T) {
	m := newModTree(t, "kernel/a.ko.xz: kernel/b.ko.zst kernel/c.ko.gz\nkernel/b.ko.zst:\nkernel/c.ko.gz:\n")
	for _, f := range []string{"kernel/a.ko.xz", "kernel/b.ko.zst", "kernel/c.ko.gz"} {
		m.module(t, f)
	}
	require.NoError(t, m.load("a"))
	assert.Equal(t, []string{"init b", "init c", "init a"}, m.k.calls)

	m.k.calls = nil
	testutil.WriteFile(t, filepath.Join(m.sysfs, "module", "compression"), "xz\n")
	require.NoError(t, m.load("a"))
	assert.Equal(t, []string{"init b", "init c", "finit-compressed a.ko.xz"}, m.k.calls, "only xz goes to this kernel compressed")

	m.k.calls, m.k.errs["a.ko.xz"] = nil, unix.EOPNOTSUPP
	require.NoError(t, m.load("a"))
	assert.Equal(t, []string{"init b", "init c", "finit-compressed a.ko.xz", "init a"}, m.k.calls)
}

// Bad input is an error naming the file or line, and the kernel gets
// nothing it should not.
func TestModuleLoaderBadInput(t *testing.T) {
	t.Run("missing module", func(t *testing.T) {
		m := newModTree(t, "kernel/a.ko:\n")
		err := m.load("nvgrace_gpu_vfio_pci")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "nvgrace_gpu_vfio_pci")
		assert.Contains(t, err.Error(), m.dir)
		assert.Empty(t, m.k.calls)
	})
	t.Run("missing file", func(t *testing.T) {
		m := newModTree(t, "kernel/a.ko: kernel/b.ko\nkernel/b.ko:\n")
		m.module(t, "kernel/a.ko")
		err := m.load("a")
		require.ErrorIs(t, err, os.ErrNotExist)
		assert.Contains(t, err.Error(), filepath.Join(m.dir, "kernel/b.ko"))
		assert.Empty(t, m.k.calls)
	})
	t.Run("missing dependency entry", func(t *testing.T) {
		m := newModTree(t, "kernel/a.ko: kernel/b.ko\n")
		err := m.load("a")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "a needs b")
	})
	t.Run("no modules.dep", func(t *testing.T) {
		m := newModTree(t, "")
		require.NoError(t, os.Remove(filepath.Join(m.dir, "modules.dep")))
		err := m.load("a")
		require.ErrorIs(t, err, os.ErrNotExist)
		assert.Contains(t, err.Error(), filepath.Join(m.dir, "modules.dep"))
	})
	for name, dep := range map[string]string{
		"no colon":         "kernel/a.ko\n",
		"escapes":          "kernel/a.ko: ../../../etc/passwd.ko\n",
		"absolute":         "/lib/modules/6.1.0-test/kernel/a.ko:\n",
		"not a module":     "kernel/a.ko: kernel/b.txt\n",
		"listed twice":     "kernel/a.ko:\nkernel/x/a.ko:\n",
		"bad module name":  "kernel/a;b.ko:\n",
		"over a line long": "kernel/a.ko: " + strings.Repeat("kernel/b.ko ", 100000) + "\n",
	} {
		t.Run("malformed modules.dep: "+name, func(t *testing.T) {
			m := newModTree(t, dep)
			err := m.load("a")
			require.Error(t, err)
			assert.Contains(t, err.Error(), filepath.Join(m.dir, "modules.dep"))
			assert.Empty(t, m.k.calls)
		})
	}
	t.Run("cycle", func(t *testing.T) {
		m := newModTree(t, "kernel/a.ko: kernel/b.ko\nkernel/b.ko: kernel/a.ko\n")
		err := m.load("a")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "cycle")
	})
	t.Run("corrupt compressed module", func(t *testing.T) {
		for _, suffix := range []string{".ko.xz", ".ko.zst", ".ko.gz"} {
			m := newModTree(t, "kernel/a"+suffix+":\n")
			testutil.WriteFile(t, filepath.Join(m.dir, "kernel/a"+suffix), "not compressed at all")
			err := m.load("a")
			require.Error(t, err, suffix)
			assert.Contains(t, err.Error(), filepath.Join(m.dir, "kernel/a"+suffix))
			assert.Empty(t, m.k.calls)
		}
	})
	t.Run("compressed non-module", func(t *testing.T) {
		m := newModTree(t, "kernel/a.ko.gz:\n")
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte("#!/bin/sh\n"))
		require.NoError(t, w.Close())
		testutil.WriteFile(t, filepath.Join(m.dir, "kernel/a.ko.gz"), b.String())
		err := m.load("a")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no ELF module")
		assert.Empty(t, m.k.calls)
	})
	t.Run("a FIFO as modules.dep", func(t *testing.T) {
		m := newModTree(t, "")
		p := filepath.Join(m.dir, "modules.dep")
		require.NoError(t, os.Remove(p))
		require.NoError(t, syscall.Mkfifo(p, 0o644))
		err := m.load("a") // must not block
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not a regular file")
	})
	t.Run("invalid name", func(t *testing.T) {
		m := newModTree(t, "kernel/a.ko:\n")
		require.Error(t, m.load("../a"))
		require.Error(t, m.load(""))
	})
}

// A built-in module (modules.builtin) needs no load, nor do built-in
// dependencies of a loadable one.
func TestModuleLoaderBuiltin(t *testing.T) {
	m := newModTree(t, "kernel/drivers/vfio/pci/vfio-pci.ko: kernel/drivers/vfio/vfio.ko\n")
	m.module(t, "kernel/drivers/vfio/pci/vfio-pci.ko")
	testutil.WriteFile(t, filepath.Join(m.dir, "modules.builtin"), "kernel/drivers/vfio/vfio.ko\nkernel/virt/lib/irqbypass.ko\n")
	require.NoError(t, m.load("irqbypass"))
	assert.Empty(t, m.k.calls)
	require.NoError(t, m.load("vfio_pci"))
	assert.Equal(t, []string{"finit vfio-pci"}, m.k.calls)

	testutil.WriteFile(t, filepath.Join(m.dir, "modules.builtin"), "vfio\n")
	err := m.load("vfio_pci")
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(m.dir, "modules.builtin"))
	assert.Contains(t, err.Error(), "line 1")
}

func TestModuleIndexLoadOrder(t *testing.T) {
	ix, err := host.ParseModulesDep(strings.NewReader("kernel/a.ko: kernel/b.ko.xz\n\nkernel/b.ko.xz:\n"))
	require.NoError(t, err)
	order, err := ix.LoadOrder("a")
	require.NoError(t, err)
	assert.Equal(t, []string{"b", "a"}, order)
	f, ok := ix.File("b")
	assert.True(t, ok)
	assert.Equal(t, "kernel/b.ko.xz", f)
	_, err = ix.LoadOrder("c")
	require.Error(t, err)
	assert.False(t, errors.Is(err, os.ErrNotExist))
}
