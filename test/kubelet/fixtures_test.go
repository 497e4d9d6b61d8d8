package kubelet

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// pciFunc is a function of a hostsim fixture with its IOMMU group.
type pciFunc struct {
	addr  host.Address
	group int
}

// fixture is what the suite expects of a hostsim fixture (see host/hostsim/fixtures.go).
type fixture struct {
	name     string
	model    string // the KubeVirt resource name of its GPUs, from testdata/pci.ids
	selector string // their vendor:device, as KubeVirt's pciVendorSelector
	env      string // the KubeVirt env variable of the resource
	gpus     []pciFunc
	switches []pciFunc // NVSwitches: no GPU resource of their own is required
}

var a10 = fixture{
	name: "a10", model: "nvidia.com/GA102GL_A10", selector: "10DE:2236",
	env:  "PCI_RESOURCE_NVIDIA_COM_GA102GL_A10",
	gpus: []pciFunc{{"0000:3b:00.0", 12}},
}

var hgxH100 = func() fixture {
	fx := fixture{name: "hgx-h100", model: "nvidia.com/GH100_H100_SXM5_80GB", selector: "10DE:2330",
		env: "PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB"}
	for i, bus := range []string{"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"} {
		fx.gpus = append(fx.gpus, pciFunc{host.Address("0000:" + bus + ":00.0"), 20 + i})
	}
	for i := range 4 {
		fx.switches = append(fx.switches, pciFunc{host.Address(fmt.Sprintf("0000:%02x:00.0", 5+i)), 40 + i})
	}
	return fx
}()

// flavour is one of the two plugins as the suite drives it.
type flavour struct {
	name     string // the binary
	resource func(fx fixture) string
	id       func(f pciFunc) string // the device ID a function is advertised under
	args     func(t *testing.T, n *node, pluginDir string) []string
	// checkAlloc checks the runtime options of an allocation of the functions fs.
	checkAlloc func(t *testing.T, fx fixture, fs []pciFunc, got runOptions)
	// checkScan checks what the plugin wrote besides serving (KubeVirt's permittedHostDevices, the
	// Kata CDI spec).
	checkScan func(t *testing.T, fx fixture, ids []string)
	cdiDir    string
	permitted string // the KubeVirt permittedHostDevices file
}

// stateArgs keep the plugins' files outside the roots (defaults under /run) in the test's folder.
func (fl *flavour) stateArgs(t *testing.T) []string {
	state := tempDir(t, "", "state")
	fl.permitted = filepath.Join(state, "permitted-host-devices.json")
	return []string{"--vfio-ready-file", filepath.Join(state, "vfio-manager.ready"), "--wait-vfio-ready=false", "-v"}
}

func kubevirt() *flavour {
	fl := &flavour{
		name:     "kubevirt-device-plugin",
		resource: func(fx fixture) string { return fx.model },
		id:       func(f pciFunc) string { return string(f.addr) },
		checkAlloc: func(t *testing.T, fx fixture, fs []pciFunc, got runOptions) {
			t.Helper()
			env := fx.env
			var bdfs []string
			for _, f := range fs {
				bdfs = append(bdfs, string(f.addr))
			}
			if gotBDFs := sortedList(got.env[env]); gotBDFs != joined(sortedStrings(bdfs)) {
				t.Errorf("env %s = %q, want the BDFs %s (comma-separated, any order); env: %v",
					env, got.env[env], joined(bdfs), got.env)
			}
			checkDevices(t, fs, got)
		},
	}
	fl.args = func(t *testing.T, n *node, dir string) []string {
		ids, err := filepath.Abs(filepath.Join("testdata", "pci.ids"))
		if err != nil {
			t.Fatalf("testdata/pci.ids: %v", err)
		}
		args := append([]string{"--device-plugin-dir", dir, "--pci-ids", ids}, n.rootArgs()...)
		args = append(args, fl.stateArgs(t)...)
		return append(args, "--permitted-host-devices-file", fl.permitted)
	}
	fl.checkScan = func(t *testing.T, fx fixture, _ []string) {
		t.Helper()
		checkPermitted(t, fl.permitted, fx)
	}
	return fl
}

func kata() *flavour {
	fl := &flavour{
		name:     "kata-device-plugin",
		resource: func(fixture) string { return "nvidia.com/pgpu" },
		id:       func(f pciFunc) string { return fmt.Sprint(f.group) },
	}
	fl.args = func(t *testing.T, n *node, dir string) []string {
		fl.cdiDir = tempDir(t, "", "cdi")
		args := append([]string{"--device-plugin-dir", dir, "--cdi-dir", fl.cdiDir}, n.rootArgs()...)
		return append(args, fl.stateArgs(t)...)
	}
	fl.checkAlloc = func(t *testing.T, fx fixture, fs []pciFunc, got runOptions) {
		t.Helper()
		var want []string
		for _, f := range fs {
			want = append(want, fmt.Sprintf("nvidia.com/pgpu=%d", f.group))
		}
		if joined(got.cdi) != joined(sortedStrings(want)) {
			t.Errorf("CDI devices %v, want %v", got.cdi, want)
		}
		checkDevices(t, fs, got)
	}
	fl.checkScan = func(t *testing.T, fx fixture, ids []string) {
		t.Helper()
		checkCDISpec(t, fl.cdiDir, "nvidia.com/pgpu", ids)
	}
	return fl
}

// checkDevices requires the device specs of VFIO passthrough of fs: /dev/vfio/vfio and each group's
// node, as host paths of the node (not under the test's dev root), mapped to the same path.
func checkDevices(t *testing.T, fs []pciFunc, got runOptions) {
	t.Helper()
	var groups []string
	for _, f := range fs {
		groups = append(groups, fmt.Sprint(f.group))
	}
	want := vfioDevices(groups...)
	if fmt.Sprint(got.devices) != fmt.Sprint(want) {
		t.Errorf("device specs (host -> container) %v, want %v", got.devices, want)
	}
}
