package host

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
	"github.com/ulikunitz/xz/lzma"
	"golang.org/x/sys/unix"
)

// DefaultModulesRoot is where a node keeps its kernels' modules, one
// folder per release: the default of --modules-root, mounted read-only
// into the pods that load modules.
const DefaultModulesRoot = "/lib/modules"

// ModuleKernel is the kernel's module loading interface: finit_module(2)
// for a module file, init_module(2) for an image in memory. The running
// kernel's is OSModuleKernel; the simulated kernel (hostsim) has its own.
type ModuleKernel interface {
	FinitModule(f *os.File, flags int) error
	InitModule(image []byte) error
}

// OSModuleKernel loads modules into the running kernel (CAP_SYS_MODULE).
type OSModuleKernel struct{}

// FinitModule calls finit_module(2) on f, without parameters.
func (OSModuleKernel) FinitModule(f *os.File, flags int) error {
	return unix.FinitModule(int(f.Fd()), "", flags)
}

// InitModule calls init_module(2) with a module image, without parameters.
func (OSModuleKernel) InitModule(image []byte) error { return unix.InitModule(image, "") }

// ModuleLoader loads kernel modules as modprobe does, without modprobe:
// it reads modules.dep, modules.builtin and modules.softdep in the modules
// folder of the running release, loads what a module needs first, skips
// built-in and already loaded modules, and hands each file to the kernel
// with finit_module(2), or, for a compressed file the kernel cannot
// decompress itself, decompresses it in memory for init_module(2).
// Module parameters from modprobe.d are not applied.
type ModuleLoader struct {
	dir    string // lib/modules/<release>
	sysfs  string // <sysfs>/module shows what is loaded and the kernel's decompressor
	kernel ModuleKernel
}

// NewModuleLoader returns a loader of the modules under dir into kernel,
// which sysfsRoot describes.
func NewModuleLoader(dir, sysfsRoot string, kernel ModuleKernel) *ModuleLoader {
	return &ModuleLoader{dir: dir, sysfs: sysfsRoot, kernel: kernel}
}

// The limits of what is read: a module index file, a module file as
// stored and a decompressed module image (the largest drivers, nvidia's
// included, are some hundred MiB unpacked).
const (
	maxIndexSize  = 64 << 20
	maxModuleSize = 512 << 20
)

// Index reads the module index of the loader's folder; modules.dep must
// exist, modules.builtin and modules.softdep may not.
func (l *ModuleLoader) Index() (*ModuleIndex, error) {
	p := filepath.Join(l.dir, "modules.dep")
	b, ok, err := readBounded(p, maxIndexSize)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("module index %s: %w (is the node's %s mounted?)", p, os.ErrNotExist, DefaultModulesRoot)
	}
	ix, err := ParseModulesDep(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	for name, parse := range map[string]func(io.Reader) error{"modules.builtin": ix.parseBuiltin, "modules.softdep": ix.parseSoftdep} {
		p := filepath.Join(l.dir, name)
		b, _, err := readBounded(p, maxIndexSize)
		if err == nil {
			err = parse(bytes.NewReader(b))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return ix, nil
}

// Load loads module and what it needs. A module already loaded, or built
// in, costs nothing; EEXIST from the kernel (loaded meanwhile) counts as
// loaded. Errors name the module and its file.
func (l *ModuleLoader) Load(ctx context.Context, module string) error {
	name := normalizeModule(module)
	if !validModuleName(name) {
		return fmt.Errorf("invalid module name %q", module)
	}
	if l.loaded(name) {
		return nil
	}
	ix, err := l.Index()
	if err != nil {
		return fmt.Errorf("load module %s: %w", name, err)
	}
	order, err := ix.LoadOrder(name)
	if err != nil {
		return fmt.Errorf("load module %s from %s: %w", name, l.dir, err)
	}
	for _, m := range order {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("load module %s: %w", name, err)
		}
		if l.loaded(m) {
			continue
		}
		file, _ := ix.File(m)
		if err := l.loadFile(m, filepath.Join(l.dir, filepath.FromSlash(file))); err != nil {
			if m != name {
				return fmt.Errorf("load module %s: %w", name, err)
			}
			return err
		}
	}
	return nil
}

// loaded reports whether the kernel lists module as a loaded module
// (/sys/module/<name>/initstate, which built-in modules lack).
func (l *ModuleLoader) loaded(module string) bool {
	_, err := os.Stat(filepath.Join(l.sysfs, "module", module, "initstate"))
	return err == nil
}

// compression is the decompressor of a module file by its name: "" for a
// plain .ko.
func compression(file string) string {
	switch {
	case strings.HasSuffix(file, ".ko.xz"):
		return "xz"
	case strings.HasSuffix(file, ".ko.zst"):
		return "zstd"
	case strings.HasSuffix(file, ".ko.gz"):
		return "gzip"
	}
	return ""
}

// kernelDecompresses reports whether the kernel decompresses modules of
// this kind itself (MODULE_INIT_COMPRESSED_FILE, since 5.17): its
// /sys/module/compression names the one it was built with.
func (l *ModuleLoader) kernelDecompresses(kind string) bool {
	b, err := os.ReadFile(filepath.Join(l.sysfs, "module", "compression"))
	return err == nil && strings.TrimSpace(string(b)) == kind
}

// loadFile hands one module file to the kernel.
func (l *ModuleLoader) loadFile(module, path string) error {
	f, err := openRegular(path)
	if err != nil {
		return fmt.Errorf("load module %s: %w", module, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() > maxModuleSize {
		return fmt.Errorf("load module %s: %s is larger than %d bytes or cannot be read (%v)", module, path, maxModuleSize, err)
	}
	kind := compression(path)
	if kind == "" {
		return loadErr(module, path, "finit_module", l.kernel.FinitModule(f, 0))
	}
	if l.kernelDecompresses(kind) {
		err := l.kernel.FinitModule(f, unix.MODULE_INIT_COMPRESSED_FILE)
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
			return loadErr(module, path, "finit_module (compressed)", err)
		}
		// An older kernel refuses the flag: decompress here.
	}
	image, err := decompress(f, kind)
	if err != nil {
		return fmt.Errorf("load module %s: %s: %w", module, path, err)
	}
	return loadErr(module, path, "init_module", l.kernel.InitModule(image))
}

// loadErr names the module and file of a failed load; EEXIST (loaded
// meanwhile) is no error.
func loadErr(module, path, call string, err error) error {
	if err == nil || errors.Is(err, unix.EEXIST) {
		return nil
	}
	return fmt.Errorf("load module %s: %s %s: %w", module, call, path, err)
}

// decompress reads a compressed module into memory, at most maxModuleSize
// bytes of it: more, or a stream that is not of its kind, is an error.
func decompress(r io.Reader, kind string) ([]byte, error) {
	var dr io.Reader
	switch kind {
	case "xz":
		// The smallest dictionary to start with: the stream's own (1 MiB for the kernel's
		// modules_install) replaces it when larger.
		x, err := xz.ReaderConfig{DictCap: lzma.MinDictCap}.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("xz: %w", err)
		}
		dr = x
	case "zstd":
		z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxModuleSize),
			zstd.WithDecoderMaxWindow(64<<20))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer z.Close()
		dr = z
	case "gzip":
		g, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		dr = g
	default:
		return nil, fmt.Errorf("unknown module compression %q", kind)
	}
	image, err := io.ReadAll(io.LimitReader(dr, maxModuleSize+1))
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w", kind, err)
	}
	if len(image) > maxModuleSize {
		return nil, fmt.Errorf("decompress %s: more than %d bytes", kind, maxModuleSize)
	}
	if !bytes.HasPrefix(image, []byte("\x7fELF")) {
		return nil, fmt.Errorf("decompress %s: the result is no ELF module", kind)
	}
	return image, nil
}

// readBounded reads a file of at most max bytes; ok is false when it does
// not exist.
func readBounded(p string, max int64) (b []byte, ok bool, err error) {
	f, err := openRegular(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	b, err = io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", p, err)
	}
	if int64(len(b)) > max {
		return nil, false, fmt.Errorf("%s is larger than %d bytes", p, max)
	}
	return b, true, nil
}

// openRegular opens a file for reading without blocking on a FIFO and
// fails unless it is a regular file.
func openRegular(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", p)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
