package host

import (
	"bufio"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

// VGPUType is the vendor-specific VFIO vGPU state of an NVIDIA SR-IOV VF
// (<vf>/nvidia/current_vgpu_type and creatable_vgpu_types).
type VGPUType struct {
	Current   int            // 0 when none
	Creatable map[int]string // type id -> name, what can be created now
}

// VGPU reads the vGPU state of a VF; ok is false when the VF has no
// nvidia/ folder (not a vendor-specific VFIO vGPU VF).
func (h *Host) VGPU(a Address) (VGPUType, bool, error) {
	dir := filepath.Join(h.functionDir(a), "nvidia")
	cur, err := readOptionalAttr(dir, "current_vgpu_type")
	if err != nil || cur == "" {
		return VGPUType{}, false, err
	}
	v := VGPUType{}
	if v.Current, err = strconv.Atoi(cur); err != nil {
		return v, false, fmt.Errorf("%s: invalid vGPU type %q", filepath.Join(dir, "current_vgpu_type"), cur)
	}
	text, err := readOptionalAttr(dir, "creatable_vgpu_types")
	if err != nil {
		return v, false, err
	}
	if v.Creatable, err = ParseVGPUTypes(text); err != nil {
		return v, false, fmt.Errorf("%s: %w", filepath.Join(dir, "creatable_vgpu_types"), err)
	}
	return v, true, nil
}

// ParseVGPUTypes parses creatable_vgpu_types: a header line "ID : vGPU
// Name", then "%-5d : %s" lines.
func ParseVGPUTypes(text string) (map[int]string, error) {
	out := map[int]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if l == "" || (line == 1 && strings.HasPrefix(l, "ID")) {
			continue
		}
		id, name, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: want \"ID : name\", got %q", line, l)
		}
		n, err := strconv.Atoi(strings.TrimSpace(id))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("line %d: invalid vGPU type id %q", line, strings.TrimSpace(id))
		}
		name = strings.TrimSpace(name)
		if strings.ContainsFunc(name, unicode.IsControl) {
			return nil, fmt.Errorf("line %d: vGPU type name %q has control characters", line, name)
		}
		out[n] = name
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	return out, nil
}

// SetVGPUType writes a VF's nvidia/current_vgpu_type: a type id creates
// the vGPU, 0 destroys it.
func (h *Host) SetVGPUType(vf Address, id int) error {
	if id < 0 {
		return fmt.Errorf("PCI function %s: invalid vGPU type id %d", vf, id)
	}
	if err := h.write(filepath.Join(h.functionDir(vf), "nvidia", "current_vgpu_type"), strconv.Itoa(id)); err != nil {
		return fmt.Errorf("PCI function %s: set current_vgpu_type to %d: %w", vf, id, err)
	}
	return nil
}

// SetNumVFs writes sriov_numvfs of a PF. The PCI core changes it only from
// or to 0, and disabling blocks while a process holds a VF.
func (h *Host) SetNumVFs(pf Address, n int) error {
	if n < 0 {
		return fmt.Errorf("PCI function %s: invalid VF count %d", pf, n)
	}
	if err := h.write(filepath.Join(h.functionDir(pf), "sriov_numvfs"), strconv.Itoa(n)); err != nil {
		return fmt.Errorf("PCI function %s: set sriov_numvfs to %d: %w", pf, n, err)
	}
	return nil
}
