package vfio

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// FuzzParseVMGPUs: any value of the admin's sandbox-gpu.io/vm-gpus
// annotation parses or fails as bad input quoting the value, never a
// panic; what parses reads back the same from its String, and resolved
// on an HGX H100 (8 GPUs on 2 NUMA nodes, 4 NVSwitches) it splits the
// eight GPUs into disjoint VM and container sets that cover them all, or
// fails as bad input.
func FuzzParseVMGPUs(f *testing.F) {
	_, h := hostsim.NewHost(f, "hgx-h100")
	p, err := NewPlanner(h)
	if err != nil {
		f.Fatal(err)
	}
	names := map[uint16]string{0x2330: "GH100 [H100 SXM5 80GB]"}
	for _, s := range []string{"", "all", "0", "3", "8", "9", "index:0,7", "index:8", "model:2330", "model:H100", "model:A10", "index:1,,2", "model:", "4096", "4097"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVMGPUs(s)
		if err != nil {
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		again, err := ParseVMGPUs(v.String())
		if err != nil || again.String() != v.String() || again.All() != v.All() {
			t.Fatalf("%q reads back as %q (%v)", s, again.String(), err)
		}
		split, err := p.Split(v, host.VendorNVIDIA, names)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("%q: split: %v", s, err)
			}
			return
		}
		seen := map[host.Address]bool{}
		for _, a := range append(append([]host.Address(nil), split.VM...), split.Container...) {
			if seen[a] {
				t.Fatalf("%q: %s is in both sets: %+v", s, a, split)
			}
			seen[a] = true
		}
		if !v.All() && len(seen) != 8 {
			t.Fatalf("%q: the split covers %d GPUs, want 8: %+v", s, len(seen), split)
		}
	})
}
