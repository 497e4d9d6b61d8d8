package realkernel

import (
	"slices"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// display is QEMU's bochs-display: vendor 1234, device 1111, a display-class function (a GPU
// to the VFIO manager's split) with no host driver in the guest.
const (
	displayVendor, displayDevice = "1234", "1111"
	display                      = "bochs-display"
)

// checkSplit: a mixed node on a real kernel. --vm-gpus 1 previews and then binds the first display
// only; index:1 returns it and binds the second; dropping the second while a process holds its
// VFIO group is refused (in use) and leaves it on vfio-pci; once released it returns.
func checkSplit(t *testing.T, con *console) {
	d0, d1 := con.vars["D0"], con.vars["D1"]
	if d0 == "" || d1 == "" || d0 == d1 {
		t.Fatalf("want two displays, have %q and %q", d0, d1)
	}
	t.Run("plan previews the split and moves nothing", func(t *testing.T) {
		st := con.step(t, "split-plan")
		if got := addresses(st.after, displayVendor, displayDevice); len(got) != 2 {
			t.Errorf("want two %s functions in sysfs, have %v", display, got)
		}
		ch := decodeChange(t, st, 0)
		if len(ch.Actions) != 1 {
			t.Errorf("%s: want one action, have %+v", st.cmd, ch.Actions)
		}
		requireAction(t, ch, d0, "", "vfio-pci")
		if sp := ch.Split; ch.Target != "split" || sp == nil || !slices.Equal(sp.VM, []host.Address{host.Address(d0)}) ||
			!slices.Equal(sp.Container, []host.Address{host.Address(d1)}) {
			t.Errorf("%s: target %q split %+v, want split with vm [%s] container [%s]", st.cmd, ch.Target, sp, d0, d1)
		}
		requireDriver(t, st, d0, "")
		requireDriver(t, st, d1, "")
	})
	t.Run("one GPU bound", func(t *testing.T) {
		st := con.step(t, "split-1")
		requireAction(t, decodeChange(t, st, 0), d0, "", "vfio-pci")
		requireDriver(t, st, d0, "vfio-pci")
		requireDriver(t, st, d1, "")
		if g := st.after.devices[d0].group; !st.after.hasVFIONode(g) {
			t.Errorf("/dev/vfio/%s missing after the split (have %v)", g, st.after.vfio)
		}
	})
	t.Run("by index", func(t *testing.T) {
		st := con.step(t, "split-index")
		ch := decodeChange(t, st, 0)
		requireAction(t, ch, d0, "vfio-pci", "")
		requireAction(t, ch, d1, "", "vfio-pci")
		requireDriver(t, st, d0, "")
		requireDriver(t, st, d1, "vfio-pci")
	})
	t.Run("a held VM GPU stays", func(t *testing.T) {
		if con.vars["HELD"] != "held" {
			t.Fatalf("the guest could not hold the group of %s open", d1)
		}
		st := con.step(t, "split-held")
		requireRefused(t, st, d1, "in use")
		requireDriver(t, st, d1, "vfio-pci")
		released := con.step(t, "split-0")
		requireAction(t, decodeChange(t, released, 0), d1, "vfio-pci", "")
		requireDriver(t, released, d1, "")
		if len(released.after.vfio) != 0 {
			t.Errorf("/dev/vfio holds %v with no VM GPU", released.after.vfio)
		}
	})
}
