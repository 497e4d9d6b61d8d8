package vgpuconfig

import (
	"fmt"
	"strconv"
	"strings"
)

// TypeName is a vGPU type's short name (the last token of its sysfs name,
// as NVIDIA's configs write it) taken apart: "A10-4Q" is product A10, 4 GB
// of framebuffer, series Q; "A100-1-5C" is product A100 on a MIG GPU
// instance of 1 slice, 5 GB, series C; "RTX6000-Ada-24Q" is product
// RTX6000-Ada.
type TypeName struct {
	Product     string
	GPUInstance int // MIG-backed types: slices of the GPU instance; 0 for time-sliced
	SizeGB      int
	Series      string // Q, C, B, A; CME and the like for MIG variants
}

// ParseTypeName parses a short vGPU type name.
func ParseTypeName(s string) (TypeName, error) {
	segs := strings.Split(s, "-")
	if len(segs) < 2 || strings.ContainsAny(s, " \t\n/") {
		return TypeName{}, fmt.Errorf("invalid vGPU type %q: want <product>-<framebuffer GB><series> such as A10-4Q", s)
	}
	last := segs[len(segs)-1]
	i := strings.IndexFunc(last, func(r rune) bool { return r < '0' || r > '9' })
	if i <= 0 || strings.IndexFunc(last[i:], func(r rune) bool { return r < 'A' || r > 'Z' }) >= 0 {
		return TypeName{}, fmt.Errorf("invalid vGPU type %q: %q is not <framebuffer GB><series> such as 4Q", s, last)
	}
	t := TypeName{Series: last[i:]}
	t.SizeGB, _ = strconv.Atoi(last[:i])
	rest := segs[:len(segs)-1]
	if len(rest) > 1 {
		if g, err := strconv.Atoi(rest[len(rest)-1]); err == nil {
			t.GPUInstance = g
			rest = rest[:len(rest)-1]
		}
	}
	t.Product = strings.Join(rest, "-")
	if t.Product == "" || t.SizeGB <= 0 || t.Product[0] < 'A' || t.Product[0] > 'Z' {
		return TypeName{}, fmt.Errorf("invalid vGPU type %q: want <product>-<framebuffer GB><series> such as A10-4Q", s)
	}
	return t, nil
}

// String is the short name.
func (t TypeName) String() string {
	if t.GPUInstance > 0 {
		return fmt.Sprintf("%s-%d-%d%s", t.Product, t.GPUInstance, t.SizeGB, t.Series)
	}
	return fmt.Sprintf("%s-%d%s", t.Product, t.SizeGB, t.Series)
}
