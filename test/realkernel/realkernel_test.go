package realkernel

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

const (
	eduVendor, eduDevice = "1234", "11e8" // QEMU's edu device, which has no host driver
	edu                  = "edu"          // its QEMU device name
	e1000e               = "e1000e"       // QEMU device and Linux driver of an 82574L, 8086:10d3
)

// TestRealKernel boots the Debian kernel under QEMU, with and without an emulated Intel IOMMU,
// and runs the static vfio-manager in the guest. Each guest runs one scenario script from
// testdata; the assertions are made here on what it printed.
func TestRealKernel(t *testing.T) {
	t.Parallel()
	env := requireHostEnv(t)
	// busybox insmod ignores modules.softdep: vfio_iommu_type1 is named explicitly.
	mods := requireModules(t, env, "vfio_iommu_type1", "vfio_pci", "e1000e")
	initScript, err := os.ReadFile(filepath.Join("testdata", "init.sh"))
	if err != nil {
		t.Fatalf("guest init: %v", err)
	}
	rd := initramfs{
		busybox: env.busybox, modulesDir: env.modulesDir, release: env.kernelVer, modules: mods,
		vfioManager: vfioManagerBinary(t, env), init: string(initScript),
	}
	t.Logf("kernel %s (%s)", env.kernelVer, filepath.Base(env.kernel))

	guests := []struct {
		name   string
		m      machine
		check  func(*testing.T, *console)
		initrd func(initramfs) initramfs // nil: rd as it is
	}{
		{"iommu", machine{iommu: true, scenario: "iommu.sh",
			devices: concat(rootPort(1, edu), rootPort(2, e1000e))}, checkIOMMU, nil},
		{"shared-group", machine{iommu: true, scenario: "shared-group.sh",
			devices: concat(rootPort(1, edu), pciBridge(2, edu, e1000e))}, checkSharedGroup, nil},
		{"no-iommu", machine{iommu: false, scenario: "no-iommu.sh",
			devices: concat(rootPort(1, e1000e), rootPort(2, edu))}, checkNoIOMMU, nil},
		{"split", machine{iommu: true, scenario: "split.sh",
			devices: concat(rootPort(1, display), rootPort(2, display))}, checkSplit, nil},
		// No module loaded by init, no modprobe: vfio-manager loads vfio_pci from the modules
		// as Debian ships them (.ko), and compressed as newer distributions ship them (.ko.xz).
		{"modules", machine{iommu: true, scenario: "modules.sh", devices: rootPort(1, edu)},
			checkModules(".ko"), modulesGuest(env.modulesDir)},
		{"modules-xz", machine{iommu: true, scenario: "modules.sh", devices: rootPort(1, edu)},
			checkModules(".ko.xz"), modulesGuest(xzModulesTree(t, env))},
	}
	for _, g := range guests {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			r := rd
			if g.initrd != nil {
				r = g.initrd(rd)
			}
			g.check(t, boot(t, env, r, g.m))
		})
	}
}

func checkIOMMU(t *testing.T, con *console) {
	nic, ifname := con.vars["NIC"], con.vars["IF"]
	var eduAddr string
	t.Run("status", func(t *testing.T) {
		if nic == "" {
			t.Errorf("the guest found no e1000e")
		}
		for _, c := range []struct{ step, addr string }{{"status-edu", ""}, {"status-nic", nic}} {
			st := con.step(t, c.step)
			s := decodeStatus(t, st, 0)
			if !s.IOMMU.Enabled {
				t.Errorf("%s: iommu.enabled false with intel_iommu=on", st.cmd)
			}
			addr := c.addr
			if addr == "" {
				eduAddr = onlyAddress(t, st.after, eduVendor, eduDevice)
				addr = eduAddr
			}
			requireStatusDevice(t, st, s, addr)
		}
	})
	if eduAddr == "" {
		t.Fatal("no edu address: later checks cannot run")
	}

	t.Run("edu bind unbind round trip by vendor", func(t *testing.T) {
		roundTrip(t, con, "edu-bind", "edu-unbind", eduAddr, "")
	})

	t.Run("e1000e bind unbind round trip by vendor and device", func(t *testing.T) {
		roundTrip(t, con, "nic-bind", "nic-unbind", nic, e1000e)
		if got := con.step(t, "nic-unbind").after.devices[nic].net; len(got) == 0 {
			t.Errorf("no network interface on %s after unbind", nic)
		}
	})

	t.Run("e1000e with its interface up refused in use", func(t *testing.T) {
		st := con.step(t, "nic-up-bind")
		requireRefused(t, st, nic, "in use")
		requireDriver(t, st, nic, e1000e)
		if ifname == "" {
			t.Errorf("no interface name found for %s", nic)
		}
	})

	t.Run("edu with its group held open not unbound", func(t *testing.T) {
		bind := con.step(t, "held-bind")
		decodeChange(t, bind, 0)
		requireDriver(t, bind, eduAddr, "vfio-pci")
		if con.vars["HELD"] != "held" {
			t.Fatalf("the guest could not hold /dev/vfio/%s open", bind.after.devices[eduAddr].group)
		}
		held := con.step(t, "held-unbind")
		requireRefused(t, held, eduAddr, "in use")
		requireDriver(t, held, eduAddr, "vfio-pci")
		group := held.after.devices[eduAddr].group
		if !held.after.hasVFIONode(group) {
			t.Errorf("/dev/vfio/%s gone though the unbind was refused", group)
		}
		released := con.step(t, "released-unbind")
		requireAction(t, decodeChange(t, released, 0), eduAddr, "vfio-pci", "")
		requireDriver(t, released, eduAddr, "")
	})
}

func checkSharedGroup(t *testing.T, con *console) {
	nic := con.vars["NIC"]
	st := con.step(t, "status")
	decodeStatus(t, st, 0)
	group := st.after.devices[nic].group
	if group == "" {
		t.Fatalf("e1000e %s has no IOMMU group", nic)
	}
	var alone, shared string // the edu behind its own root port, the one beside the e1000e
	for _, a := range addresses(st.after, eduVendor, eduDevice) {
		if st.after.devices[a].group == group {
			shared = a
		} else {
			alone = a
		}
	}
	if alone == "" || shared == "" {
		t.Fatalf("want one edu in the e1000e's group %s and one outside it: %v", group, st.after.devices)
	}

	t.Run("group shared with a bound e1000e refused and untouched", func(t *testing.T) {
		bind := con.step(t, "edu-bind")
		ch := requireRefused(t, bind, shared, "group")
		for _, a := range ch.Actions {
			if string(a.Address) == shared || string(a.Address) == nic {
				t.Errorf("action on the refused group: %+v", a)
			}
		}
		requireDriver(t, bind, shared, "")
		requireDriver(t, bind, nic, e1000e)
		for addr, d := range bind.after.devices {
			if d.group == group && d.driver != st.after.devices[addr].driver {
				t.Errorf("%s in the refused group changed driver %q -> %q", addr, st.after.devices[addr].driver, d.driver)
			}
		}
	})

	t.Run("edu with its own group bound", func(t *testing.T) {
		bind := con.step(t, "edu-bind")
		requireAction(t, decodeChange(t, bind, 2), alone, "", "vfio-pci")
		requireDriver(t, bind, alone, "vfio-pci")
		if g := bind.after.devices[alone].group; !bind.after.hasVFIONode(g) {
			t.Errorf("/dev/vfio/%s missing after bind (have %v)", g, bind.after.vfio)
		}
	})
}

func checkNoIOMMU(t *testing.T, con *console) {
	nic := con.vars["NIC"]
	t.Run("status", func(t *testing.T) {
		s := decodeStatus(t, con.step(t, "status"), 0)
		if s.IOMMU.Enabled {
			t.Errorf("status: iommu.enabled true without an IOMMU")
		}
		for _, d := range s.Devices {
			if d.IOMMUGroup != nil {
				t.Errorf("status: %s has iommuGroup %d without an IOMMU", d.Address, *d.IOMMUGroup)
			}
		}
	})
	t.Run("e1000e refused without iommu and left on its driver", func(t *testing.T) {
		st := con.step(t, "nic-bind")
		requireRefused(t, st, nic, "iommu")
		requireDriver(t, st, nic, e1000e)
		if len(st.after.vfio) != 0 {
			t.Errorf("/dev/vfio holds groups %v without an IOMMU", st.after.vfio)
		}
	})
	t.Run("edu refused without iommu", func(t *testing.T) {
		st := con.step(t, "edu-bind")
		requireRefused(t, st, onlyAddress(t, st.after, eduVendor, eduDevice), "iommu")
	})
}

// requireStatusDevice checks that status lists addr as sysfs shows it, in an IOMMU group.
func requireStatusDevice(t *testing.T, st *stepResult, s vfio.StatusReport, addr string) {
	t.Helper()
	d, ok := statusDevice(s, addr)
	sys := st.after.devices[addr]
	switch {
	case !ok:
		t.Errorf("%s: %s missing", st.cmd, addr)
	case d.IOMMUGroup == nil || strconv.Itoa(*d.IOMMUGroup) != sys.group:
		t.Errorf("%s: %s iommuGroup %v, sysfs says %q", st.cmd, addr, d.IOMMUGroup, sys.group)
	case d.Driver != sys.driver:
		t.Errorf("%s: %s driver %q, sysfs says %q", st.cmd, addr, d.Driver, sys.driver)
	case d.Vendor != sys.vendor || d.Device != sys.device || d.Class != sys.class:
		t.Errorf("%s: %s ids %s:%s class %s, sysfs says %s:%s class %s",
			st.cmd, addr, d.Vendor, d.Device, d.Class, sys.vendor, sys.device, sys.class)
	case d.Role != "other":
		t.Errorf("%s: %s role %q, want other", st.cmd, addr, d.Role)
	}
}

// roundTrip checks a bind step then an unbind step of addr: vfio-pci and /dev/vfio/<group>
// after the bind, hostDriver ("" for none) and no group node after the unbind.
func roundTrip(t *testing.T, con *console, bindStep, unbindStep, addr, hostDriver string) {
	t.Helper()
	bind := con.step(t, bindStep)
	requireAction(t, decodeChange(t, bind, 0), addr, hostDriver, "vfio-pci")
	requireDriver(t, bind, addr, "vfio-pci")
	group := bind.after.devices[addr].group
	if !bind.after.hasVFIONode(group) {
		t.Errorf("/dev/vfio/%s missing after bind (have %v)", group, bind.after.vfio)
	}
	unbind := con.step(t, unbindStep)
	requireAction(t, decodeChange(t, unbind, 0), addr, "vfio-pci", hostDriver)
	requireDriver(t, unbind, addr, hostDriver)
	if unbind.after.hasVFIONode(group) {
		t.Errorf("/dev/vfio/%s still there after unbind", group)
	}
}

// statusDevice finds addr in `vfio-manager status --output json`, decoded into the VFIO
// manager's own report types (whose JSON keys vfio/cli's tests pin to the contract).
func statusDevice(s vfio.StatusReport, addr string) (vfio.DeviceReport, bool) {
	for _, d := range s.Devices {
		if d.Address == addr {
			return d, true
		}
	}
	return vfio.DeviceReport{}, false
}

func (c *console) step(t *testing.T, name string) *stepResult {
	t.Helper()
	st, ok := c.steps[name]
	if !ok || !st.ended {
		t.Fatalf("step %s did not run to its end in the guest", name)
	}
	return st
}

func decodeStatus(t *testing.T, st *stepResult, wantRC int) vfio.StatusReport {
	t.Helper()
	var s vfio.StatusReport
	decodeStep(t, st, wantRC, &s)
	return s
}

func decodeChange(t *testing.T, st *stepResult, wantRC int) vfio.ChangeReport {
	t.Helper()
	var c vfio.ChangeReport
	decodeStep(t, st, wantRC, &c)
	return c
}

func decodeStep(t *testing.T, st *stepResult, wantRC int, v any) {
	t.Helper()
	if st.rc != wantRC {
		t.Errorf("%s: exit %d, want %d\nstdout:\n%sstderr:\n%s", st.cmd, st.rc, wantRC, st.stdout, st.stderr)
	}
	if err := json.Unmarshal([]byte(st.stdout), v); err != nil {
		t.Fatalf("%s: decode JSON: %v\nstdout:\n%sstderr:\n%s", st.cmd, err, st.stdout, st.stderr)
	}
}

// requireRefused checks exit 2 and a refusal of addr whose reason contains word.
func requireRefused(t *testing.T, st *stepResult, addr, word string) vfio.ChangeReport {
	t.Helper()
	ch := decodeChange(t, st, 2)
	for _, r := range ch.Refused {
		if string(r.Address) == addr {
			if !strings.Contains(strings.ToLower(r.Reason), word) {
				t.Errorf("%s: %s refused for %q, want a reason containing %q", st.cmd, addr, r.Reason, word)
			}
			return ch
		}
	}
	t.Errorf("%s: %s not refused (want %q): %s", st.cmd, addr, word, st.stdout)
	return ch
}

func requireAction(t *testing.T, ch vfio.ChangeReport, addr, from, to string) {
	t.Helper()
	for _, a := range ch.Actions {
		if string(a.Address) == addr {
			if a.From != from || a.To != to {
				t.Errorf("action on %s: %q -> %q, want %q -> %q", addr, a.From, a.To, from, to)
			}
			return
		}
	}
	t.Errorf("no action on %s in %+v", addr, ch)
}

func requireDriver(t *testing.T, st *stepResult, addr, want string) {
	t.Helper()
	d, ok := st.after.devices[addr]
	switch {
	case !ok:
		t.Errorf("after %s: %s not in sysfs", st.name, addr)
	case d.driver != want:
		t.Errorf("after %s: %s on driver %q, want %q", st.name, addr, d.driver, want)
	}
}

func addresses(s snapshot, vendor, device string) []string {
	var out []string
	for a, d := range s.devices {
		if d.vendor == vendor && d.device == device {
			out = append(out, a)
		}
	}
	return out
}

func onlyAddress(t *testing.T, s snapshot, vendor, device string) string {
	t.Helper()
	a := addresses(s, vendor, device)
	if len(a) != 1 {
		t.Fatalf("want one %s:%s function, have %v", vendor, device, a)
	}
	return a[0]
}

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
