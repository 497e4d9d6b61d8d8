package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// node is a simulated host (the product's hostsim kernel) whose NVIDIA functions the test moves
// between vfio-pci and their host drivers in-process, while the plugins watch the same tree.
type node struct {
	k *hostsim.Kernel
	h *host.Host
}

// newNode builds a hostsim fixture (on tmpfs when /dev/shm is writable: much faster) and binds every
// NVIDIA function, NVSwitches included, to vfio-pci.
func newNode(t *testing.T, fixture string) *node {
	t.Helper()
	fx, err := hostsim.Lookup(fixture)
	if err != nil {
		t.Fatalf("fixture %s: %v", fixture, err)
	}
	dir := tempDir(t, fastTempBase(), "sim")
	k, err := fx.Build(dir)
	if err != nil {
		t.Fatalf("build fixture %s in %s: %v", fixture, dir, err)
	}
	n := &node{k: k, h: host.New(k.Options())}
	if err := n.move(vfio.Selection{All: true, Vendor: 0x10de, NVSwitches: true}, vfio.ToVFIO); err != nil {
		t.Fatalf("fixture %s: %v", fixture, err)
	}
	return n
}

// move plans and applies a selection's move to a target, failing on any refusal.
func (n *node) move(sel vfio.Selection, target vfio.Target) error {
	p, err := vfio.NewPlanner(n.h)
	if err != nil {
		return fmt.Errorf("planner over %s: %w", n.k.Root(), err)
	}
	plan, err := p.Plan(sel, target)
	if err != nil {
		return fmt.Errorf("plan %+v to %s: %w", sel, target, err)
	}
	res := vfio.Apply(context.Background(), n.h, plan, vfio.ApplyOptions{})
	if !res.OK() {
		return fmt.Errorf("apply %+v to %s: refused %+v", sel, target, res.Refused)
	}
	if len(res.Actions) == 0 {
		return fmt.Errorf("apply %+v to %s: nothing moved", sel, target)
	}
	return nil
}

// rootArgs are the plugins' host-root flags for this node.
func (n *node) rootArgs() []string {
	o := n.k.Options()
	return []string{"--sysfs-root", o.SysfsRoot, "--dev-root", o.DevRoot, "--proc-root", o.ProcRoot,
		"--modules-dir", o.ModulesDir}
}

// fastTempBase is /dev/shm when it is a writable folder, else the default temporary folder.
func fastTempBase() string {
	f, err := os.CreateTemp("/dev/shm", "probe")
	if err != nil {
		return ""
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	return "/dev/shm"
}

// socketDirMax keeps DIR/<plugin socket> under the 108-byte limit of unix socket paths.
const socketDirMax = 50

// socketDir is a short temporary folder for unix sockets: t.TempDir() paths are too long for them.
func socketDir(t *testing.T, pattern string) string {
	t.Helper()
	base := ""
	if len(filepath.Join(os.TempDir(), pattern+"0123456789")) > socketDirMax {
		base = "/tmp"
	}
	return tempDir(t, base, pattern)
}

// tempDir is a new folder under base (the default temporary folder when empty), removed after the
// test.
func tempDir(t *testing.T, base, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp(base, pattern)
	if err != nil {
		t.Fatalf("temporary folder %s: %v", pattern, err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}
