package nri

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// FuzzCheckpoint: any kubelet checkpoint content gives an allocation or an
// error naming the file, never a panic; an allocation written back as a
// checkpoint (plain ID lists) reads back the same.
func FuzzCheckpoint(f *testing.F) {
	f.Add([]byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"init","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-b","GPU-a"]}}],"RegisteredDevices":{}},"Checksum":1}`), "u1", "init")
	f.Add([]byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"c","ResourceName":"nvidia.com/gpu","DeviceIDs":["0","1"]}]}}`), "u1", "c")
	f.Add([]byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"c","ResourceName":"r","DeviceIDs":"x"}]}}`), "u1", "c")
	f.Add([]byte(`{"Data":null}`), "", "")
	f.Add([]byte(`[`), "u", "c")
	f.Fuzz(func(t *testing.T, data []byte, pod, container string) {
		alloc, err := lookupCheckpoint("ckpt", data, pod, container)
		if err != nil {
			if alloc != nil || !strings.Contains(err.Error(), "kubelet device checkpoint ckpt") {
				t.Fatalf("error does not name the file (result %v): %v", alloc, err)
			}
			return
		}
		type entry struct {
			PodUID, ContainerName, ResourceName string
			DeviceIDs                           []string
		}
		var back struct {
			Data struct{ PodDeviceEntries []entry }
		}
		want := Allocation{}
		for res, ids := range alloc {
			back.Data.PodDeviceEntries = append(back.Data.PodDeviceEntries, entry{pod, container, res, ids})
			if len(ids) > 0 {
				want[res] = ids
			}
		}
		b, err := json.Marshal(back)
		if err != nil {
			t.Fatal(err)
		}
		again, err := lookupCheckpoint("again", b, pod, container)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		for res, ids := range again {
			if len(ids) == 0 {
				delete(again, res)
			}
		}
		if !reflect.DeepEqual(again, want) {
			t.Fatalf("%q read %v, written back as %s reads %v", data, alloc, b, again)
		}
	})
}

// FuzzRequestedIDs: the request annotation gives trimmed, non-empty IDs
// without commas; the per-container key wins; joining the IDs parses back
// to them.
func FuzzRequestedIDs(f *testing.F) {
	f.Add("0, 1", "exporter", true)
	f.Add("all", "", false)
	f.Add(" ,GPU-1234,, nvidia.com/gpu=0 ", "c", false)
	f.Fuzz(func(t *testing.T, value, container string, perContainer bool) {
		ann := map[string]string{names.RequestAnnotation: value}
		if perContainer {
			ann = map[string]string{names.RequestAnnotation + "." + container: value, names.RequestAnnotation: "decoy"}
		}
		ids := RequestedIDs(ann, container)
		for _, id := range ids {
			if id == "" || id != strings.TrimSpace(id) || strings.Contains(id, ",") || !strings.Contains(value, id) {
				t.Fatalf("%q gave the ID %q", value, id)
			}
		}
		if again := RequestedIDs(map[string]string{names.RequestAnnotation: strings.Join(ids, ",")}, container); !reflect.DeepEqual(again, ids) {
			t.Fatalf("%q gave %q, which joined gives %q", value, ids, again)
		}
	})
}

// FuzzDeviceName: a kubelet device ID maps to a valid CDI device name of
// the kind (a time-slicing replica "::n" to its GPU), or to an error
// naming the ID; the mapping is stable on its own result.
func FuzzDeviceName(f *testing.F) {
	for _, s := range []string{"0", "GPU-8f2a5c3e-1b4d-4e6f-9a0b-123456789abc", "GPU-1::3", "all", "../x", "a=b", "", "::", "x::y::z", "é"} {
		f.Add(s)
	}
	r := &Resolver{kind: "nvidia.com/gpu"}
	f.Fuzz(func(t *testing.T, id string) {
		name, err := r.Name(id)
		if err != nil {
			if name != "" || !strings.Contains(err.Error(), fmt.Sprintf("%q", id)) {
				t.Fatalf("error does not name the ID %q (result %q): %v", id, name, err)
			}
			return
		}
		vendor, class, dev, err := parser.ParseQualifiedName(name)
		if err != nil || vendor != "nvidia.com" || class != "gpu" {
			t.Fatalf("%q gave %q: not a device of nvidia.com/gpu: %v", id, name, err)
		}
		if base, _, _ := strings.Cut(id, "::"); dev != base {
			t.Fatalf("%q gave device %q, want %q", id, dev, base)
		}
		if again, err := r.Name(dev); err != nil || again != name {
			t.Fatalf("%q gave %q, whose device %q gives %q, %v", id, name, dev, again, err)
		}
	})
}
