//go:build realkernelguest

package guest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// QEMU's NVMe controller (1b36:0010), started with sriov_max_vfs.
const nvmeVendor, nvmeDevice = 0x1b36, 0x0010

// bindTimeout bounds the wait for a VF to reach vfio-pci.
const bindTimeout = 30 * time.Second

// TestSRIOV drives VF enable and disable against QEMU's SR-IOV NVMe controller, through
// package vgpu's enable-vfs and disable-vfs steps and the host model beneath them: VFs appear
// with their links and groups, the count changes only from 0, disable works when idle and is
// never written while a process holds a VF's VFIO device (its group fd, or only its device fd).
func TestSRIOV(t *testing.T) {
	rec := &recordingWriter{}
	h := newHost(rec)
	pf := findPF(t, h)
	total := pf.SRIOVTotalVFs
	numvfs := "/sys/bus/pci/devices/" + string(pf.Address) + "/sriov_numvfs"

	t.Run("enable lists the VFs in their own groups", func(t *testing.T) {
		mark := rec.mark()
		if err := enableVFs(h, pf.Address, total); err != nil {
			t.Fatal(err)
		}
		requireWrites(t, rec, mark, write{numvfs, fmt.Sprint(total)})
		requireVFs(t, h, pf, total)
	})

	t.Run("count changes only from 0", func(t *testing.T) {
		// The step writes nothing once the VFs are there, and leaves another count alone.
		mark := rec.mark()
		if err := enableVFs(h, pf.Address, total); err != nil {
			t.Errorf("enable-vfs step of %d VFs with %d enabled: %v, want it found done", total, total, err)
		}
		if err := enableVFs(h, pf.Address, total-1); err == nil || !strings.Contains(err.Error(), "left alone") {
			t.Errorf("enable-vfs step of %d VFs with %d enabled: %v, want it left alone", total-1, total, err)
		}
		requireWrites(t, rec, mark)
		// The kernel's rule beneath it.
		err := h.SetNumVFs(pf.Address, total-1)
		if !errors.Is(err, syscall.EBUSY) {
			t.Errorf("sriov_numvfs %d -> %d: %v, want EBUSY", total, total-1, err)
		}
		if err != nil && !strings.Contains(err.Error(), string(pf.Address)) {
			t.Errorf("the error does not name the PF: %v", err)
		}
		requireVFs(t, h, pf, total)
	})

	// disable writes 0 to sriov_numvfs and checks the VFs are gone: with none in use, it is allowed.
	disable := func(t *testing.T) {
		mark := rec.mark()
		if err := disableVFs(h, pf.Address); err != nil {
			t.Fatal(err)
		}
		requireWrites(t, rec, mark, write{numvfs, "0"})
		requireVFs(t, h, pf, 0)
	}

	t.Run("disable when idle", disable)

	var vf *host.Function // on vfio-pci
	t.Run("held VF: in use and no sriov_numvfs written", func(t *testing.T) {
		if err := enableVFs(h, pf.Address, total); err != nil {
			t.Fatal(err)
		}
		vfs := requireVFs(t, h, pf, total)
		vf = bindVFIO(t, h, vfs[0])
		hd := startHolder(t, vf.IOMMUGroup, string(vf.Address), holdAsQEMU)
		defer rec.guard(numvfs)()
		mark := rec.mark()

		// What package vgpu's check reads: the process scan names the holder.
		requireScanHeldBy(t, h, func(u *host.Usage) ([]string, error) { return h.InUse(vf, u) }, hd.pid, vf.IOMMUGroup)

		err := disableVFs(h, pf.Address)
		if err == nil || !strings.HasPrefix(err.Error(), "in use:") {
			t.Errorf("disable under a held VF: %v, want an in-use refusal", err)
		} else {
			requireHeldBy(t, err.Error(), hd.pid, fmt.Sprintf("/dev/vfio/%d", vf.IOMMUGroup))
		}
		requireNoWriteTo(t, rec, mark, "/sriov_numvfs")
		requireVFs(t, h, pf, total)

		hd.release(t)
	})

	t.Run("VF device fd held without its group fd: the group claim sees it", func(t *testing.T) {
		if vf == nil {
			t.Fatal("no VF on vfio-pci from the held case")
		}
		hd := startHolder(t, vf.IOMMUGroup, string(vf.Address), holdDeviceOnly)
		defer rec.guard(numvfs)()
		mark := rec.mark()
		requireClaimRefused(t, h, vf.IOMMUGroup, hd.pid)
		requireInUse(t, disableVFs(h, pf.Address), fmt.Sprintf("/dev/vfio/%d", vf.IOMMUGroup))
		requireNoWriteTo(t, rec, mark, "/sriov_numvfs")
		hd.release(t)
	})

	t.Run("released VF: disabled", disable)
}

// findPF returns the one NVMe controller with SR-IOV, on nvme with its VFs disabled.
func findPF(t *testing.T, h *host.Host) *host.Function {
	t.Helper()
	snap, err := h.Scan()
	if err != nil {
		t.Fatal(err)
	}
	var pfs []*host.Function
	for _, f := range snap.Functions {
		if f.Vendor == nvmeVendor && f.Device == nvmeDevice && f.PhysFn == "" {
			pfs = append(pfs, f)
		}
	}
	if len(pfs) != 1 {
		t.Fatalf("want one NVMe controller %04x:%04x, have %d", nvmeVendor, nvmeDevice, len(pfs))
	}
	pf := pfs[0]
	switch {
	case pf.SRIOVTotalVFs < 2:
		t.Fatalf("NVMe controller %s: sriov_totalvfs %d, want at least 2", pf.Address, pf.SRIOVTotalVFs)
	case pf.SRIOVNumVFs != 0 || len(pf.VirtFns) != 0:
		t.Fatalf("NVMe controller %s starts with %d VFs %v", pf.Address, pf.SRIOVNumVFs, pf.VirtFns)
	case pf.Driver != "nvme":
		t.Errorf("NVMe controller %s on driver %q, want nvme", pf.Address, pf.Driver)
	case pf.IOMMUGroup == host.NoGroup:
		t.Errorf("NVMe controller %s has no IOMMU group", pf.Address)
	}
	return pf
}

// requireVFs checks that the host model shows n VFs of pf, linked both ways, each alone in
// an IOMMU group of its own, and none left behind after a disable; it returns the VFs.
func requireVFs(t *testing.T, h *host.Host, pf *host.Function, n int) []host.Address {
	t.Helper()
	f, err := h.ReadFunction(pf.Address)
	if err != nil {
		t.Fatal(err)
	}
	if f.SRIOVNumVFs != n || len(f.VirtFns) != n {
		t.Fatalf("PF %s: sriov_numvfs %d and virtfn links %v, want %d", pf.Address, f.SRIOVNumVFs, f.VirtFns, n)
	}
	snap, err := h.Scan()
	if err != nil {
		t.Fatal(err)
	}
	groups := map[int]bool{pf.IOMMUGroup: true}
	for _, vf := range f.VirtFns {
		v, ok := snap.Function(vf)
		switch {
		case !ok:
			t.Errorf("VF %s of %s not in the scan", vf, pf.Address)
		case v.PhysFn != pf.Address:
			t.Errorf("VF %s: physfn %q, want %s", vf, v.PhysFn, pf.Address)
		case v.IOMMUGroup == host.NoGroup || groups[v.IOMMUGroup]:
			t.Errorf("VF %s: IOMMU group %d is not its own", vf, v.IOMMUGroup)
		case len(snap.GroupMembers(v)) != 1:
			t.Errorf("VF %s shares IOMMU group %d with %d functions", vf, v.IOMMUGroup, len(snap.GroupMembers(v))-1)
		}
		if ok {
			groups[v.IOMMUGroup] = true
		}
	}
	var left []host.Address
	for _, g := range snap.Functions {
		if g.PhysFn == pf.Address && !slices.Contains(f.VirtFns, g.Address) {
			left = append(left, g.Address)
		}
	}
	if len(left) > 0 {
		t.Errorf("VFs of %s in sysfs beyond its virtfn links: %v", pf.Address, left)
	}
	return f.VirtFns
}

// bindVFIO binds a VF to vfio-pci with driver_override and drivers_probe (the nvme driver
// may have it, or may have given it up: QEMU's secondary controllers start offline) and waits
// for /dev/vfio/<group>.
func bindVFIO(t *testing.T, h *host.Host, vf host.Address) *host.Function {
	t.Helper()
	if err := h.SetDriverOverride(vf, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	var f *host.Function
	testutil.Eventually(t, bindTimeout, "VF "+string(vf)+" on vfio-pci", func() bool {
		var err error
		if f, err = h.ReadFunction(vf); err != nil {
			t.Fatalf("VF %s: %v", vf, err)
		}
		switch f.Driver {
		case "vfio-pci":
			return isCharDevice(fmt.Sprintf("/dev/vfio/%d", f.IOMMUGroup))
		case "":
			if err := h.Probe(vf); err != nil {
				t.Logf("VF %s: %v", vf, err)
			}
		default:
			if err := h.Unbind(vf, f.Driver); err != nil {
				t.Logf("VF %s: %v", vf, err) // the driver may be giving it up meanwhile
			}
		}
		return false
	})
	return f
}
