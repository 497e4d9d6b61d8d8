package kubelet

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"

	"sigs.k8s.io/yaml"
)

// cdiEdits is the part of CDI containerEdits the suite checks.
type cdiEdits struct {
	DeviceNodes []struct {
		Path     string `json:"path"`
		HostPath string `json:"hostPath"`
	} `json:"deviceNodes"`
}

// cdiSpec is the part of a CDI spec (JSON or YAML) the suite checks.
type cdiSpec struct {
	Kind    string `json:"kind"`
	Devices []struct {
		Name           string   `json:"name"`
		ContainerEdits cdiEdits `json:"containerEdits"`
	} `json:"devices"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

// nodes returns the host paths of edits' device nodes (the path, when no hostPath is set).
func (e cdiEdits) nodes() []string {
	var out []string
	for _, n := range e.DeviceNodes {
		p := n.HostPath
		if p == "" {
			p = n.Path
		}
		out = append(out, p)
	}
	return out
}

// checkCDISpec requires exactly one spec of the kind in dir, naming exactly the device IDs, each of
// which resolves to /dev/vfio/vfio and /dev/vfio/<id> on the node.
func checkCDISpec(t *testing.T, dir, kind string, ids []string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("CDI dir: %v", err)
	}
	var specs []cdiSpec
	var files []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); e.IsDir() || (ext != ".json" && ext != ".yaml") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatalf("CDI spec: %v", err)
		}
		var s cdiSpec
		if err := yaml.Unmarshal(data, &s); err != nil {
			t.Fatalf("CDI spec %s: %v\n%s", e.Name(), err, data)
		}
		if s.Kind == kind {
			specs = append(specs, s)
			files = append(files, e.Name())
		}
	}
	if len(specs) != 1 {
		t.Fatalf("CDI dir %s: %d specs of kind %s (%v), want 1", dir, len(specs), kind, files)
	}
	s := specs[0]
	var names []string
	for _, d := range s.Devices {
		names = append(names, d.Name)
		nodes := append(d.ContainerEdits.nodes(), s.ContainerEdits.nodes()...)
		for _, want := range []string{"/dev/vfio/vfio", "/dev/vfio/" + d.Name} {
			if !slices.Contains(nodes, want) {
				t.Errorf("CDI spec %s: device %s has device nodes %v, want %s among them", files[0], d.Name, nodes, want)
			}
		}
	}
	if joined(sortedStrings(names)) != joined(ids) {
		t.Errorf("CDI spec %s names devices %v, want %v", files[0], names, ids)
	}
}

// checkPermitted requires the KubeVirt permittedHostDevices file to permit the fixture's GPU model
// as an externally provided PCI resource.
func checkPermitted(t *testing.T, file string, fx fixture) {
	t.Helper()
	var got struct {
		PCIHostDevices []struct {
			Selector string `json:"pciVendorSelector"`
			Resource string `json:"resourceName"`
			External bool   `json:"externalResourceProvider"`
		} `json:"pciHostDevices"`
	}
	var data []byte
	err := e2e.Poll(registerWithin, func() bool {
		var err error
		data, err = os.ReadFile(file)
		return err == nil && yaml.Unmarshal(data, &got) == nil && len(got.PCIHostDevices) > 0
	})
	if err != nil {
		t.Fatalf("permittedHostDevices file %s: %v (%q)", file, err, data)
	}
	for _, d := range got.PCIHostDevices {
		if d.Resource == fx.model {
			if !d.External || !strings.EqualFold(d.Selector, fx.selector) {
				t.Errorf("permittedHostDevices entry for %s: %+v, want selector %s, externalResourceProvider", fx.model, d, fx.selector)
			}
			return
		}
	}
	t.Errorf("permittedHostDevices %s has no entry for %s:\n%s", file, fx.model, data)
}

// sortedStrings returns a sorted copy.
func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}

// sortedList sorts the items of a comma-separated list.
func sortedList(s string) string {
	if s == "" {
		return ""
	}
	return joined(sortedStrings(strings.Split(s, ",")))
}
