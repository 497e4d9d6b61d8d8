package realkernel

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// modulesGuest shapes rd for a guest whose init loads no module and whose /lib/modules/<release>
// is the whole modules folder dir, as a node has it: vfio-manager loads vfio_pci itself.
func modulesGuest(dir string) func(initramfs) initramfs {
	return func(rd initramfs) initramfs {
		rd.modulesDir, rd.modules, rd.wholeTree = dir, nil, true
		return rd
	}
}

// xzModulesTree copies the kernel's modules folder to a temporary one with every module
// compressed as a distribution built with CONFIG_MODULE_COMPRESS_XZ ships it (Debian from trixie
// on: xz --check=crc32 --lzma2=dict=1MiB, the kernel's own modules_install options), then indexes
// it with depmod, so that modules.dep names the .ko.xz files. The Debian kernel under test has no
// in-kernel decompressor (CONFIG_MODULE_COMPRESS_NONE), so vfio-manager must decompress them.
func xzModulesTree(t *testing.T, env hostEnv) string {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "lib", "modules", env.kernelVer)
	err := filepath.WalkDir(env.modulesDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(env.modulesDir, p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(filepath.Base(rel), "modules.") {
			return nil // depmod writes them anew
		}
		out := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !strings.HasSuffix(rel, ".ko") {
			return os.WriteFile(out, b, 0o644)
		}
		cmd := exec.CommandContext(t.Context(), "xz", "--check=crc32", "--lzma2=dict=1MiB", "-c")
		cmd.Stdin = strings.NewReader(string(b))
		xzb, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("xz %s: %w", p, err)
		}
		return os.WriteFile(out+".xz", xzb, 0o644)
	})
	if err != nil {
		t.Fatalf("compress the modules of %s: %v", env.modulesDir, err)
	}
	for _, idx := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo"} {
		b, err := os.ReadFile(filepath.Join(env.modulesDir, idx))
		if err != nil {
			t.Fatalf("module index: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, idx), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	depmod, err := exec.LookPath("depmod")
	if err != nil {
		skipOrFail(t, "depmod not found: %s", fetchHint)
	}
	if out, err := exec.CommandContext(ctx, depmod, "-b", base, env.kernelVer).CombinedOutput(); err != nil {
		t.Fatalf("depmod -b %s %s: %v\n%s", base, env.kernelVer, err, out)
	}
	dep, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil || !strings.Contains(string(dep), "vfio-pci.ko.xz:") {
		t.Fatalf("depmod wrote no vfio-pci.ko.xz entry (%v):\n%s", err, dep)
	}
	return dir
}

// checkModules: vfio-manager, with no module tool on PATH and vfio not loaded, binds the edu
// and the kernel shows vfio_pci (and what it needs, and vfio's softdep vfio_iommu_type1) loaded
// from files ending in suffix; unbind and a second bind work on the loaded modules.
func checkModules(suffix string) func(*testing.T, *console) {
	return func(t *testing.T, con *console) {
		if got := con.vars["MODPROBE"]; got != "none" {
			t.Errorf("a module tool is on the guest's PATH: %s", got)
		}
		if files := con.vars["FILES"]; !strings.Contains(files, "vfio-pci"+suffix+",") {
			t.Errorf("the guest's modules folder has %q, want vfio-pci%s", files, suffix)
		}
		before, after := moduleSet(con.vars["BEFORE"]), moduleSet(con.vars["AFTER"])
		wanted := []string{"vfio_pci", "vfio_pci_core", "vfio", "irqbypass", "vfio_iommu_type1"}
		for _, m := range wanted {
			if before[m] {
				t.Errorf("%s was loaded before vfio-manager ran (modules: %s)", m, con.vars["BEFORE"])
			}
		}
		bind := con.step(t, "edu-bind")
		edu := onlyAddress(t, bind.after, eduVendor, eduDevice)
		requireAction(t, decodeChange(t, bind, 0), edu, "", "vfio-pci")
		requireDriver(t, bind, edu, "vfio-pci")
		if g := bind.after.devices[edu].group; !bind.after.hasVFIONode(g) {
			t.Errorf("/dev/vfio/%s missing after bind (have %v)", g, bind.after.vfio)
		}
		for _, m := range wanted {
			if !after[m] {
				t.Errorf("%s not loaded after the bind (modules: %s)", m, con.vars["AFTER"])
			}
		}
		if got := con.vars["INITSTATE"]; got != "live" {
			t.Errorf("/sys/module/vfio_pci/initstate is %q after the bind, want live", got)
		}
		unbind := con.step(t, "edu-unbind")
		requireAction(t, decodeChange(t, unbind, 0), edu, "vfio-pci", "")
		requireDriver(t, unbind, edu, "")
		rebind := con.step(t, "edu-rebind")
		requireAction(t, decodeChange(t, rebind, 0), edu, "", "vfio-pci")
		requireDriver(t, rebind, edu, "vfio-pci")
	}
}

// moduleSet parses "a,b,c," into a set.
func moduleSet(list string) map[string]bool {
	out := map[string]bool{}
	for _, m := range strings.Split(list, ",") {
		if m != "" {
			out[m] = true
		}
	}
	return out
}
