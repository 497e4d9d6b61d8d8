package controllers

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// FuzzPublishedPermitted: whatever a node writes in its permitted-devices
// annotation (names.PermittedAnnotation), the operator keeps only NVIDIA
// entries within the bounds (nvidia.com/ resources, 10DE:XXXX selectors,
// "NVIDIA " mdev types, at most 8 selectors per resource and 64 entries),
// each filed under its own resource; a problem names the node and the
// annotation; never a panic; what it keeps, published again, is kept the
// same without a problem.
func FuzzPublishedPermitted(f *testing.F) {
	f.Add(`{"pciHostDevices":[{"pciVendorSelector":"10de:2236","resourceName":"nvidia.com/GA102GL_A10"}],"mediatedDevices":[{"mdevNameSelector":"NVIDIA A10-4Q","resourceName":"nvidia.com/NVIDIA_A10-4Q"}]}`)
	f.Add(`{"pciHostDevices":[{"pciVendorSelector":"8086:1234","resourceName":"intel.com/nic"},{"pciVendorSelector":"10DE:22zz","resourceName":"nvidia.com/x"}]}`)
	f.Add(`{"mediatedDevices":[{"mdevNameSelector":"i915-GVTg_V5_4","resourceName":"nvidia.com/x"}]}`)
	f.Add(`not json`)
	f.Add(`{"pciHostDevices":null}`)
	f.Fuzz(func(t *testing.T, raw string) {
		node := func(ann string) *corev1.Node {
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Annotations: map[string]string{names.PermittedAnnotation: ann}}}
		}
		pci, mdev, err := published(node(raw))
		if err != nil && (!strings.Contains(err.Error(), "node gpu-1") || !strings.Contains(err.Error(), names.PermittedAnnotation)) {
			t.Fatalf("problem does not name the node and annotation: %v", err)
		}
		total := 0
		var back kubevirtv1.PermittedHostDevices
		for res, es := range pci {
			if len(es) > maxSelectorsPerResource {
				t.Fatalf("%s: %d selectors", res, len(es))
			}
			for _, e := range es {
				if e.ResourceName != res || !strings.HasPrefix(res, "nvidia.com/") || !pciSelector.MatchString(e.PCIVendorSelector) || !e.ExternalResourceProvider {
					t.Fatalf("kept %+v under %q", e, res)
				}
			}
			total += len(es)
			back.PciHostDevices = append(back.PciHostDevices, es...)
		}
		for res, es := range mdev {
			if len(es) > maxSelectorsPerResource {
				t.Fatalf("%s: %d selectors", res, len(es))
			}
			for _, e := range es {
				if e.ResourceName != res || !strings.HasPrefix(res, "nvidia.com/") || !strings.HasPrefix(e.MDEVNameSelector, "NVIDIA ") || !e.ExternalResourceProvider {
					t.Fatalf("kept %+v under %q", e, res)
				}
			}
			total += len(es)
			back.MediatedDevices = append(back.MediatedDevices, es...)
		}
		if total > maxPublishedEntries {
			t.Fatalf("kept %d entries", total)
		}
		b, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		pci2, mdev2, err := published(node(string(b)))
		if err != nil {
			t.Fatalf("what was kept (%s) is refused: %v", b, err)
		}
		if len(pci) > 0 && !reflect.DeepEqual(pci2, pci) || len(mdev) > 0 && !reflect.DeepEqual(mdev2, mdev) || len(pci) == 0 && len(pci2) > 0 || len(mdev) == 0 && len(mdev2) > 0 {
			t.Fatalf("kept %v %v; published again %v %v", pci, mdev, pci2, mdev2)
		}
	})
}
