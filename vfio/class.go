package vfio

import (
	"fmt"
	"strings"
)

// ClassMatches reports whether a function's 24-bit PCI class starts with
// one of the hex prefixes (every class when there are none).
func ClassMatches(class uint32, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	hex := fmt.Sprintf("%06x", class)
	for _, p := range prefixes {
		if strings.HasPrefix(hex, p) {
			return true
		}
	}
	return false
}

// ParseClasses checks PCI class prefixes (2, 4 or 6 hex digits: base
// class, subclass, programming interface; an optional 0x) and returns them
// in lower case without 0x. An error names the bad value.
func ParseClasses(in []string) ([]string, error) {
	var out []string
	for _, c := range in {
		t := strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(c), "0x"), "0X"))
		if n := len(t); n != 2 && n != 4 && n != 6 || strings.Trim(t, "0123456789abcdef") != "" {
			return nil, fmt.Errorf("%w: PCI class %q: want 2, 4 or 6 hex digits (03 display controllers, 0302 3D controllers)", ErrBadInput, c)
		}
		out = append(out, t)
	}
	return out, nil
}
