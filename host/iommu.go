package host

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// IOMMU is the platform's IOMMU state.
type IOMMU struct {
	Enabled       bool
	UnsafeNoIOMMU bool     // vfio's enable_unsafe_noiommu_mode is Y
	Units         []string // /sys/class/iommu entries (dmar0, ivhd0)
}

// Group is one IOMMU group.
type Group struct {
	ID      int
	Type    string // DMA, DMA-FQ, identity, blocked; "" when unknown
	Members []Address
}

// GroupMembers returns the functions sharing f's IOMMU group (f included),
// or just f without IOMMU.
func (s *Snapshot) GroupMembers(f *Function) []*Function {
	g, ok := s.Groups[f.IOMMUGroup]
	if f.IOMMUGroup == NoGroup || !ok {
		return []*Function{f}
	}
	out := make([]*Function, 0, len(g.Members))
	for _, a := range g.Members {
		if m, ok := s.byAddr[a]; ok {
			out = append(out, m)
		}
	}
	return out
}

func (h *Host) readIOMMU() (IOMMU, error) {
	var st IOMMU
	units, err := dirNames(filepath.Join(h.sysfs, "class", "iommu"))
	if err != nil {
		return st, err
	}
	st.Units = units
	st.Enabled = len(units) > 0
	mode, err := readOptionalAttr(filepath.Join(h.sysfs, "module", "vfio", "parameters"), "enable_unsafe_noiommu_mode")
	if err != nil {
		return st, err
	}
	st.UnsafeNoIOMMU = mode == "Y" || mode == "1"
	return st, nil
}

// parseGroup parses an IOMMU group number as the kernel names its folder:
// decimal digits only.
func parseGroup(s string) (int, error) {
	if s == "" || len(s) > 9 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("invalid IOMMU group %q: want a decimal number", s)
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("invalid IOMMU group %q: %w", s, err)
	}
	return v, nil
}
