package host

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
)

// Modalias is a parsed PCI modalias,
// "pci:v000010DEd00002236sv000010DEsd0000148Fbc03sc02i00".
type Modalias struct {
	Vendor, Device, SubVendor, SubDevice uint32
	BaseClass, SubClass, ProgIf          uint8
}

// ParseModalias parses a PCI modalias as the kernel writes it in sysfs.
func ParseModalias(s string) (Modalias, error) {
	var m Modalias
	t := strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(t, "pci:")
	if !ok {
		return m, fmt.Errorf("invalid PCI modalias %q: missing pci: prefix", s)
	}
	fields := []struct {
		key   string
		width int
		out   func(uint64)
	}{
		{"v", 8, func(v uint64) { m.Vendor = uint32(v) }},
		{"d", 8, func(v uint64) { m.Device = uint32(v) }},
		{"sv", 8, func(v uint64) { m.SubVendor = uint32(v) }},
		{"sd", 8, func(v uint64) { m.SubDevice = uint32(v) }},
		{"bc", 2, func(v uint64) { m.BaseClass = uint8(v) }},
		{"sc", 2, func(v uint64) { m.SubClass = uint8(v) }},
		{"i", 2, func(v uint64) { m.ProgIf = uint8(v) }},
	}
	for _, f := range fields {
		var ok bool
		rest, ok = strings.CutPrefix(rest, f.key)
		if !ok || len(rest) < f.width || !isHex(rest[:f.width]) {
			return m, fmt.Errorf("invalid PCI modalias %q: bad field %q", s, f.key)
		}
		v, err := strconv.ParseUint(rest[:f.width], 16, 32)
		if err != nil {
			return m, fmt.Errorf("invalid PCI modalias %q: field %q: %w", s, f.key, err)
		}
		f.out(v)
		rest = rest[f.width:]
	}
	if rest != "" {
		return m, fmt.Errorf("invalid PCI modalias %q: trailing %q", s, rest)
	}
	return m, nil
}

// String renders the modalias in the kernel's format.
func (m Modalias) String() string {
	return fmt.Sprintf("pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X",
		m.Vendor, m.Device, m.SubVendor, m.SubDevice, m.BaseClass, m.SubClass, m.ProgIf)
}

// Alias is one "alias PATTERN MODULE" line of modules.alias.
type Alias struct {
	Pattern string
	Module  string
}

// vfioAliasPrefix marks the aliases that vfio variant drivers declare
// (PCI_DRIVER_OVERRIDE_DEVICE_VFIO): they only match through driver_override.
const vfioAliasPrefix = "vfio_pci:"

// IsVFIO reports whether the alias belongs to a vfio variant driver.
func (a Alias) IsVFIO() bool { return strings.HasPrefix(a.Pattern, vfioAliasPrefix) }

// Matches reports whether the alias matches the function's modalias (for a
// vfio alias, the "vfio_pci:" form of it). Matching follows modprobe's
// fnmatch rules; a malformed pattern never matches.
func (a Alias) Matches(modalias string) bool {
	subject := modalias
	if a.IsVFIO() {
		rest, ok := strings.CutPrefix(modalias, "pci:")
		if !ok {
			return false
		}
		subject = vfioAliasPrefix + rest
	}
	ok, err := path.Match(a.Pattern, subject)
	return err == nil && ok
}

// specificity ranks aliases: more literal characters is more specific.
func (a Alias) specificity() int {
	return len(a.Pattern) - strings.Count(a.Pattern, "*")*8
}

// ParseAliases reads modules.alias text. Only PCI and vfio_pci aliases are
// kept; comments and blank lines are skipped; a malformed alias line is an
// error naming its line number.
func ParseAliases(r io.Reader) ([]Alias, error) {
	var out []Alias
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 3 || f[0] != "alias" {
			return nil, fmt.Errorf("modules.alias line %d: want \"alias PATTERN MODULE\", got %q", line, text)
		}
		if !strings.HasPrefix(f[1], "pci:") && !strings.HasPrefix(f[1], vfioAliasPrefix) {
			continue
		}
		out = append(out, Alias{Pattern: f[1], Module: f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read modules.alias: %w", err)
	}
	return out, nil
}

// BestMatch returns the most specific alias of the given kind (vfio or
// not) matching modalias, and false when none does. Ties keep file order.
func BestMatch(aliases []Alias, modalias string, vfio bool) (Alias, bool) {
	var best Alias
	found := false
	for _, a := range aliases {
		if a.IsVFIO() != vfio || !a.Matches(modalias) {
			continue
		}
		if !found || a.specificity() > best.specificity() {
			best, found = a, true
		}
	}
	return best, found
}
