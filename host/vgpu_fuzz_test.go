package host_test

import (
	"fmt"
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

// FuzzParseMdevDescription: any mdev type description gives counts that
// are zero or positive, never a panic, and the two it reads, written back,
// read the same whatever else the description says.
func FuzzParseMdevDescription(f *testing.F) {
	for _, s := range []string{
		"num_heads=4, frl_config=60, framebuffer=4096M, max_resolution=5120x2880, max_instance=6",
		"max_instance=0", "framebuffer=-1M", "framebuffer=99999999999999999999M", "max_instance==3,,", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, desc string) {
		n, fb := host.ParseMdevDescription(desc)
		if n < 0 || fb < 0 {
			t.Fatalf("%q gave %d instances, %d MB", desc, n, fb)
		}
		n2, fb2 := host.ParseMdevDescription(fmt.Sprintf("framebuffer=%dM, max_instance=%d", fb, n))
		if n2 != n || fb2 != fb {
			t.Fatalf("%q gave %d, %d; written back %d, %d", desc, n, fb, n2, fb2)
		}
		if n3, fb3 := host.ParseMdevDescription("num_heads=4, " + desc + ", frl_config=60"); n3 != n || fb3 != fb {
			t.Fatalf("%q gave %d, %d; among other fields %d, %d", desc, n, fb, n3, fb3)
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
