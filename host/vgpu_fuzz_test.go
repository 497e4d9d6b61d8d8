package host_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// FuzzParseVGPUTypes: any creatable_vgpu_types text parses or fails naming
// a line, never a panic (and never with a partial result); what parses has
// positive type ids and trimmed names, and written back in the kernel's
// format parses to the same.
func FuzzParseVGPUTypes(f *testing.F) {
	for _, s := range []string{
		"ID    : vGPU Name\n1155  : NVIDIA L40S-24Q\n1156  : NVIDIA L40S-48Q\n",
		"ID    : vGPU Name\n", "", "x\n", "0 : zero\n", "-3 : neg\n", "7:\n", " 12 : a : b \r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		m, err := host.ParseVGPUTypes(text)
		if err != nil {
			if m != nil || !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error without a line, or with a result %v: %v", m, err)
			}
			return
		}
		for id, name := range m {
			if id <= 0 || name != strings.TrimSpace(name) || strings.ContainsAny(name, "\n\r") {
				t.Fatalf("%q gave type %d named %q", text, id, name)
			}
		}
		written := hostsim.FormatVGPUTypes(m)
		again, err := host.ParseVGPUTypes(written)
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("%q gave %v; written back as %q it gives %v, %v", text, m, written, again, err)
		}
	})
}

// TestParseVGPUTypesLongLine: a line over the scanner's limit fails naming
// it, with no partial result.
func TestParseVGPUTypesLongLine(t *testing.T) {
	m, err := host.ParseVGPUTypes("ID : vGPU Name\n1 : a\n2 : " + strings.Repeat("x", 70000) + "\n")
	if err == nil || m != nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("got %v, %v", m, err)
	}
}
