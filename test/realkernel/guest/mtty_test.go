//go:build realkernelguest

package guest

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// mttyParent is the kernel's mtty sample driver as an mdev parent: no PCI function, it
// registers under /sys/class/mdev_bus/mtty.
const mttyParent = host.Address("mtty")

// The sample's two types: each instance takes one or two of its 24 serial ports.
var mttyTypeNames = map[string]string{"mtty-1": "Single port serial", "mtty-2": "Dual port serial"}

// TestMtty drives the mdev protocol against the mtty sample driver, through package vgpu's
// create and remove steps and the host model beneath them: types, create, list, a create or
// remove of a changed mdev refused, remove when idle, and no remove written while a process
// holds the mdev's VFIO device (its group fd, or only its device fd).
func TestMtty(t *testing.T) {
	rec := &recordingWriter{}
	h := newHost(rec)
	var idle map[string]host.MdevType // the types with no mdev

	t.Run("types", func(t *testing.T) {
		idle = mttyTypes(t, h)
		for id, name := range mttyTypeNames {
			mt, ok := idle[id]
			switch {
			case !ok:
				t.Errorf("mtty offers no type %s: %v", id, idle)
			case mt.Name != name:
				t.Errorf("type %s name %q, want %q", id, mt.Name, name)
			case mt.Available <= 0:
				t.Errorf("type %s: no available instances", id)
			}
		}
		if one, two := idle["mtty-1"].Available, idle["mtty-2"].Available; one != 2*two {
			t.Errorf("available instances: %d of mtty-1 and %d of mtty-2, want twice as many single ports", one, two)
		}
		mdevs, err := h.Mdevs()
		if err != nil {
			t.Fatal(err)
		}
		if len(mdevs) != 0 {
			t.Fatalf("mdevs before any create: %v", mdevs)
		}
	})
	if idle == nil {
		t.Fatal("no mtty types: the other cases cannot run")
	}

	uuid := newUUID(t)
	t.Run("create lists the mdev and takes instances", func(t *testing.T) {
		mark := rec.mark()
		if err := createMdev(h, uuid, "mtty-2"); err != nil {
			t.Fatal(err)
		}
		requireWrites(t, rec, mark, write{"/sys/class/mdev_bus/mtty/mdev_supported_types/mtty-2/create", uuid})
		requireListed(t, h, uuid, "mtty-2")

		mark = rec.mark()
		if err := createMdev(h, uuid, "mtty-2"); err != nil {
			t.Errorf("create step of an mdev already there: %v, want it found done", err)
		}
		requireWrites(t, rec, mark)
		now := mttyTypes(t, h)
		if got, want := now["mtty-2"].Available, idle["mtty-2"].Available-1; got != want {
			t.Errorf("mtty-2 available %d after one create, want %d", got, want)
		}
		if got, want := now["mtty-1"].Available, idle["mtty-1"].Available-2; got != want {
			t.Errorf("mtty-1 available %d after a dual-port create, want %d", got, want)
		}
	})

	t.Run("same UUID again fails with EEXIST", func(t *testing.T) {
		err := h.CreateMdev(mttyParent, "mtty-1", uuid)
		if !errors.Is(err, syscall.EEXIST) {
			t.Errorf("create %s again: %v, want EEXIST", uuid, err)
		}
		if err != nil && !strings.Contains(err.Error(), uuid) {
			t.Errorf("the error does not name the mdev: %v", err)
		}
		requireListed(t, h, uuid, "mtty-2")
	})

	t.Run("an mdev of another type than planned is left alone", func(t *testing.T) {
		mark := rec.mark()
		if err := createMdev(h, uuid, "mtty-1"); err == nil || !strings.Contains(err.Error(), uuid) {
			t.Errorf("create step of type mtty-1 over mdev %s of type mtty-2: %v, want an error naming it", uuid, err)
		}
		if err := removeMdev(h, uuid, "mtty-1"); err == nil || !strings.Contains(err.Error(), "left alone") {
			t.Errorf("remove step of mdev %s planned as mtty-1: %v, want it left alone", uuid, err)
		}
		requireWrites(t, rec, mark)
		requireListed(t, h, uuid, "mtty-2")
	})

	t.Run("remove when idle", func(t *testing.T) {
		m := requireListed(t, h, uuid, "mtty-2")
		mark := rec.mark()
		if err := removeMdev(h, uuid, "mtty-2"); err != nil {
			t.Fatal(err)
		}
		requireWrites(t, rec, mark, write{"/sys/bus/mdev/devices/" + uuid + "/remove", "1"})
		requireGone(t, h, m)
		now := mttyTypes(t, h)
		for id, mt := range idle {
			if now[id].Available != mt.Available {
				t.Errorf("%s available %d after the remove, want %d again", id, now[id].Available, mt.Available)
			}
		}
	})

	held := newUUID(t)
	t.Run("held device: in use and no remove written", func(t *testing.T) {
		if err := createMdev(h, held, "mtty-1"); err != nil {
			t.Fatal(err)
		}
		m := requireListed(t, h, held, "mtty-1")
		hd := startHolder(t, m.IOMMUGroup, held, holdAsQEMU)
		defer rec.guard("/sys/bus/mdev/devices/" + held + "/remove")()
		mark := rec.mark()

		// What package vgpu's check reads: the process scan names the holder.
		requireScanHeldBy(t, h, func(u *host.Usage) ([]string, error) { return h.MdevInUse(m, u) }, hd.pid, m.IOMMUGroup)

		err := removeMdev(h, held, "mtty-1")
		if err == nil || !strings.HasPrefix(err.Error(), "in use:") {
			t.Errorf("remove of a held mdev: %v, want an in-use refusal", err)
		} else {
			requireHeldBy(t, err.Error(), hd.pid, held)
		}
		requireNoWriteTo(t, rec, mark, "/remove")
		requireListed(t, h, held, "mtty-1")

		hd.release(t)
	})

	t.Run("released device: removed", func(t *testing.T) {
		m := requireListed(t, h, held, "mtty-1")
		mark := rec.mark()
		if err := removeMdev(h, held, "mtty-1"); err != nil {
			t.Fatalf("after the holder exited: %v", err)
		}
		requireWrites(t, rec, mark, write{"/sys/bus/mdev/devices/" + held + "/remove", "1"})
		requireGone(t, h, m)
	})

	t.Run("device fd held without its group fd: the group claim sees it", func(t *testing.T) {
		uuid := newUUID(t)
		if err := createMdev(h, uuid, "mtty-1"); err != nil {
			t.Fatal(err)
		}
		m := requireListed(t, h, uuid, "mtty-1")
		hd := startHolder(t, m.IOMMUGroup, uuid, holdDeviceOnly)
		unguard := rec.guard("/sys/bus/mdev/devices/" + uuid + "/remove")
		mark := rec.mark()
		requireClaimRefused(t, h, m.IOMMUGroup, hd.pid)
		requireInUse(t, removeMdev(h, uuid, "mtty-1"), fmt.Sprintf("/dev/vfio/%d", m.IOMMUGroup))
		requireNoWriteTo(t, rec, mark, "/remove")
		hd.release(t)
		unguard()
		if err := removeMdev(h, uuid, "mtty-1"); err != nil {
			t.Fatal(err)
		}
		requireGone(t, h, m)
	})
}

// requireClaimRefused checks, with pid holding only a device fd of group, that no process
// has /dev/vfio/<group> among its open files (the scan cannot see the holder), and that the
// host model's group claim is refused in use all the same: the group stays referenced by the
// device fd. What the scan-based check says is logged: a remove or sriov_numvfs write it
// allowed here would block until the holder exits.
func requireClaimRefused(t *testing.T, h *host.Host, group, pid int) {
	t.Helper()
	node := fmt.Sprintf("/dev/vfio/%d", group)
	u, err := h.ScanUsage()
	if err != nil {
		t.Fatal(err)
	}
	if hs := u.Holders(node); len(hs) > 0 {
		t.Fatalf("%s is among the open files of %v: the holder did not close it", node, hs)
	}
	release, err := h.ClaimGroup(group)
	if err == nil {
		release()
		t.Fatalf("claim of IOMMU group %d succeeded while pid %d holds a device of it", group, pid)
	}
	if !strings.HasPrefix(err.Error(), "in use:") || !strings.Contains(err.Error(), node) {
		t.Errorf("claim of IOMMU group %d: %v, want an in-use error naming %s", group, err, node)
	}
	t.Logf("group claim: %v", err)
}

// mttyTypes reads the mtty parent's types by id.
func mttyTypes(t *testing.T, h *host.Host) map[string]host.MdevType {
	t.Helper()
	types, err := h.MdevTypes(mttyParent)
	if err != nil {
		t.Fatalf("types of mdev parent %s: %v", mttyParent, err)
	}
	out := map[string]host.MdevType{}
	for _, mt := range types {
		out[mt.ID] = mt
	}
	return out
}

// requireListed checks that the host model lists the mdev on mtty with its type, driver and
// an IOMMU group of its own whose /dev/vfio node exists, and returns it.
func requireListed(t *testing.T, h *host.Host, uuid, typeID string) host.Mdev {
	t.Helper()
	mdevs, err := h.Mdevs()
	if err != nil {
		t.Fatal(err)
	}
	var m host.Mdev
	for _, x := range mdevs {
		if x.UUID == uuid {
			m = x
		}
	}
	if m.UUID == "" {
		t.Fatalf("mdev %s not listed: %+v", uuid, mdevs)
	}
	if one, ok, err := h.ReadMdev(uuid); err != nil || !ok || one.IOMMUGroup != m.IOMMUGroup {
		t.Errorf("ReadMdev %s: %+v ok=%v err=%v, Mdevs says %+v", uuid, one, ok, err, m)
	}
	switch {
	case m.ParentName != string(mttyParent) || m.Parent != "":
		t.Errorf("mdev %s: parent %q name %q, want no PCI parent and name %s", uuid, m.Parent, m.ParentName, mttyParent)
	case m.TypeID != typeID || m.TypeName != mttyTypeNames[typeID]:
		t.Errorf("mdev %s: type %s %q, want %s %q", uuid, m.TypeID, m.TypeName, typeID, mttyTypeNames[typeID])
	case m.Driver != "mtty":
		t.Errorf("mdev %s: driver %q, want mtty", uuid, m.Driver)
	case m.IOMMUGroup == host.NoGroup:
		t.Errorf("mdev %s has no IOMMU group", uuid)
	case !isCharDevice(fmt.Sprintf("/dev/vfio/%d", m.IOMMUGroup)):
		t.Errorf("mdev %s: /dev/vfio/%d is not there", uuid, m.IOMMUGroup)
	}
	for _, x := range mdevs {
		if x.UUID != uuid && x.IOMMUGroup == m.IOMMUGroup {
			t.Errorf("mdevs %s and %s share IOMMU group %d", uuid, x.UUID, m.IOMMUGroup)
		}
	}
	return m
}

// requireGone checks that the mdev and its group node are gone.
func requireGone(t *testing.T, h *host.Host, m host.Mdev) {
	t.Helper()
	if _, ok, err := h.ReadMdev(m.UUID); err != nil || ok {
		t.Errorf("mdev %s still there after remove (err %v)", m.UUID, err)
	}
	if err := h.StillMdev(m.UUID, m.IOMMUGroup); err == nil {
		t.Errorf("mdev %s: StillMdev found it after remove", m.UUID)
	}
	if isCharDevice(fmt.Sprintf("/dev/vfio/%d", m.IOMMUGroup)) {
		t.Errorf("/dev/vfio/%d still there after mdev %s was removed", m.IOMMUGroup, m.UUID)
	}
}

// requireScanHeldBy scans the open files of every process and requires inUse, given the scan,
// to name the holder's pid and /dev/vfio/<group> among its reasons.
func requireScanHeldBy(t *testing.T, h *host.Host, inUse func(*host.Usage) ([]string, error), pid, group int) {
	t.Helper()
	u, err := h.ScanUsage()
	if err != nil {
		t.Fatal(err)
	}
	reasons, err := inUse(u)
	if err != nil {
		t.Fatal(err)
	}
	requireHeldBy(t, strings.Join(reasons, "; "), pid, fmt.Sprintf("/dev/vfio/%d", group))
}

// requireHeldBy checks that an in-use reason names the holder's pid and what.
func requireHeldBy(t *testing.T, reason string, pid int, what string) {
	t.Helper()
	if !strings.Contains(reason, fmt.Sprintf("pid %d", pid)) || !strings.Contains(reason, what) {
		t.Errorf("in-use reason %q does not name pid %d and %s", reason, pid, what)
	}
}

// requireInUse checks that a step was refused in use, naming what.
func requireInUse(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), "in use:") || !strings.Contains(err.Error(), what) {
		t.Errorf("step: %v, want an in-use refusal naming %s", err, what)
	}
}
