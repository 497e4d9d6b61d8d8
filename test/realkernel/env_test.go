package realkernel

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
)

const (
	kernelDirEnv   = "SANDBOX_GPU_KERNEL_DIR"
	vfioManagerEnv = "SANDBOX_GPU_VFIO_MANAGER"
	fetchHint      = "run hack/fetch-kernel.sh (as root) to install QEMU, busybox-static, the Debian kernel and the mtty sample driver built for it"
)

// hostEnv is what the host provides: QEMU, the extracted kernel and a static busybox.
type hostEnv struct {
	repoRoot   string
	qemu       string
	kernel     string // vmlinux when extracted (boots faster), else vmlinuz
	kernelVer  string
	modulesDir string // lib/modules/<version>
	busybox    string
}

// requireHostEnv finds what the test needs or skips the test naming what to run.
func requireHostEnv(t *testing.T) hostEnv {
	t.Helper()
	root, err := e2e.RepoRoot()
	if err != nil {
		t.Fatalf("find the repository root: %v", err)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		skipOrFail(t, "qemu-system-x86_64 not found: %s", fetchHint)
	}
	kdir := os.Getenv(kernelDirEnv)
	if kdir == "" {
		kdir = filepath.Join(root, ".cache", "kernel")
	}
	verBytes, err := os.ReadFile(filepath.Join(kdir, ".complete"))
	if err != nil {
		skipOrFail(t, "no extracted kernel in %s (%s overrides it): %s", kdir, kernelDirEnv, fetchHint)
	}
	env := hostEnv{repoRoot: root, qemu: qemu, kernelVer: strings.TrimSpace(string(verBytes))}
	env.modulesDir = filepath.Join(kdir, "lib", "modules", env.kernelVer)
	env.kernel = filepath.Join(kdir, "boot", "vmlinux-"+env.kernelVer)
	if _, err := os.Stat(env.kernel); err != nil {
		env.kernel = filepath.Join(kdir, "boot", "vmlinuz-"+env.kernelVer)
	}
	for _, p := range []string{env.kernel, filepath.Join(env.modulesDir, "modules.dep")} {
		if _, err := os.Stat(p); err != nil {
			skipOrFail(t, "kernel %s in %s is incomplete (%v): delete %s and %s", env.kernelVer, kdir, err, kdir, fetchHint)
		}
	}
	env.busybox = filepath.Join(kdir, "busybox")
	if err := requireStatic(env.busybox); err != nil {
		skipOrFail(t, "static busybox: %v: %s", err, fetchHint)
	}
	return env
}

// requireStatic fails unless path is an ELF executable without an interpreter: the guest
// has no dynamic loader.
func requireStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("executable %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("executable %s is dynamically linked", path)
		}
	}
	return nil
}

// vfioManagerBinary builds ./cmd/vfio-manager statically, or returns the prebuilt binary
// named by SANDBOX_GPU_VFIO_MANAGER (a static binary, or a shell script for busybox sh). The
// guest is x86_64 whatever the host is.
func vfioManagerBinary(t *testing.T, env hostEnv) string {
	t.Helper()
	if p := os.Getenv(vfioManagerEnv); p != "" {
		if isScript(p) {
			return p // a stand-in run by busybox sh, to check the harness itself
		}
		if err := requireStatic(p); err != nil {
			t.Fatalf("%s: %v", vfioManagerEnv, err)
		}
		return p
	}
	out := filepath.Join(t.TempDir(), "vfio-manager")
	// The image's build (hack/images.sh build_binaries): the binary the vfio-manager image carries.
	buildStatic(t, env.repoRoot, "vfio-manager", out, "./cmd/vfio-manager", append([]string{"build"}, imageBuildFlags()...)...)
	return out
}

// imageBuildFlags are the go build flags of hack/images.sh's build_binaries, which builds the
// binaries the images carry: with them (and CGO_ENABLED=0, GOOS=linux, GOARCH=amd64, as
// buildStatic sets) the guest runs the bytes of the amd64 vfio-manager image.
func imageBuildFlags() []string {
	return []string{"-buildvcs=false", "-ldflags=-s -w -buildid= -B none"}
}

// buildStatic builds pkg into out for the guest, with `go <goArgs> -trimpath -o out pkg` in dir:
// static (CGO_ENABLED=0) and x86_64 whatever the host is. It fails the test unless the result is
// static; what names the binary in the messages.
func buildStatic(t *testing.T, dir, what, out, pkg string, goArgs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", append(goArgs, "-trimpath", "-o", out, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	start := time.Now()
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s (%s): %v\n%s", what, pkg, err, msg)
	}
	t.Logf("built static %s in %s", what, time.Since(start).Round(time.Millisecond))
	if err := requireStatic(out); err != nil {
		t.Fatal(err)
	}
}

// isScript tells whether path starts with "#!".
func isScript(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 2)
	_, err = io.ReadFull(f, b)
	return err == nil && string(b) == "#!"
}

// moduleLoadOrder resolves names (as modprobe spells them) to module files under dir, each
// after its dependencies, from dir/modules.dep. Built-in modules are left out.
func moduleLoadOrder(dir string, names []string) ([]string, error) {
	depText, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("module index: %w", err)
	}
	deps := map[string][]string{} // path -> its dependencies' paths
	byName := map[string]string{} // normalized name -> path
	for line := range strings.Lines(string(depText)) {
		path, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		deps[path] = strings.Fields(rest)
		byName[moduleName(path)] = path
	}
	builtin, err := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("built-in module list: %w", err)
	}
	isBuiltin := map[string]bool{}
	for line := range strings.Lines(string(builtin)) {
		isBuiltin[moduleName(strings.TrimSpace(line))] = true
	}

	var order []string
	seen := map[string]bool{}
	var visit func(path string)
	visit = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		for _, d := range deps[path] {
			visit(d)
		}
		order = append(order, filepath.Join(dir, path))
	}
	for _, n := range names {
		key := moduleName(n)
		path, ok := byName[key]
		switch {
		case ok:
			visit(path)
		case isBuiltin[key]:
		default:
			return nil, fmt.Errorf("module %s: %w (%s/modules.dep)", n, errNoModule, dir)
		}
	}
	for _, p := range order {
		if !strings.HasSuffix(p, ".ko") {
			return nil, fmt.Errorf("module %s: compressed modules are not supported by busybox insmod", p)
		}
	}
	return order, nil
}

// errNoModule is a module the extracted kernel lacks: a cache from an older fetch-kernel.sh.
var errNoModule = errors.New("not in the extracted kernel")

// requireModules resolves names with moduleLoadOrder; a module the cache lacks is a missing
// peer (hack/fetch-kernel.sh refreshes the cache), anything else fails the test.
func requireModules(t *testing.T, env hostEnv, names ...string) []string {
	t.Helper()
	mods, err := moduleLoadOrder(env.modulesDir, names)
	if errors.Is(err, errNoModule) {
		skipOrFail(t, "%v: %s", err, fetchHint)
	}
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

// moduleName turns kernel/drivers/vfio/pci/vfio-pci.ko into vfio_pci.
func moduleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// skipOrFail reports a missing QEMU or kernel: a failure, so the proof
// cannot silently vanish (testutil.MissingPeer).
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	testutil.MissingPeer(t, format, args...)
}
