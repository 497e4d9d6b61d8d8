package host

import (
	"fmt"
	"strconv"
	"strings"
)

// Address is a canonical PCI function address, "dddd:bb:dd.f" in lower case.
type Address string

// ParseAddress validates a PCI address ("0000:3b:00.0" or the short
// "3b:00.0") and returns its canonical form. Anything else, including path
// separators or "..", is an error, so an Address is always safe to join to
// a sysfs path. The domain has 4 to 8 hex digits: the kernel prints it with
// %04x, and Intel VMD creates domains from 0x10000 ("10000:e1:00.0").
func ParseAddress(s string) (Address, error) {
	in := strings.ToLower(strings.TrimSpace(s))
	if strings.Count(in, ":") == 1 {
		in = "0000:" + in
	}
	var dom, bus, dev, fn uint64
	parts := strings.Split(in, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("invalid PCI address %q: want dddd:bb:dd.f", s)
	}
	slotFn := strings.Split(parts[2], ".")
	if len(slotFn) != 2 {
		return "", fmt.Errorf("invalid PCI address %q: want dddd:bb:dd.f", s)
	}
	fields := []struct {
		text               string
		minWidth, maxWidth int
		max                uint64
		out                *uint64
		name               string
	}{
		{parts[0], 4, 8, 0xffffffff, &dom, "domain"},
		{parts[1], 2, 2, 0xff, &bus, "bus"},
		{slotFn[0], 2, 2, 0x1f, &dev, "device"},
		{slotFn[1], 1, 1, 7, &fn, "function"},
	}
	for _, f := range fields {
		if len(f.text) < f.minWidth || len(f.text) > f.maxWidth || !isHex(f.text) {
			return "", fmt.Errorf("invalid PCI address %q: bad %s %q", s, f.name, f.text)
		}
		v, err := strconv.ParseUint(f.text, 16, 32)
		if err != nil || v > f.max {
			return "", fmt.Errorf("invalid PCI address %q: %s %q out of range", s, f.name, f.text)
		}
		*f.out = v
	}
	return Address(fmt.Sprintf("%04x:%02x:%02x.%x", dom, bus, dev, fn)), nil
}

// Slot is the address without the function number: functions that share a
// slot belong to one card.
func (a Address) Slot() string {
	s := string(a)
	if i := strings.LastIndexByte(s, '.'); i >= 0 {
		return s[:i]
	}
	return s
}

func (a Address) String() string { return string(a) }

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return s != ""
}

// trimHexPrefix removes one "0x" or "0X" prefix.
func trimHexPrefix(s string) string {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		return s[2:]
	}
	return s
}

// ParseID parses a PCI vendor or device id such as "10de", "0x10DE" or
// "0x10de\n" (as sysfs writes it).
func ParseID(s string) (uint16, error) {
	v, err := parseHexValue(s, "PCI id", 4)
	return uint16(v), err
}

// ParseClass parses a sysfs class value such as "0x030200".
func ParseClass(s string) (uint32, error) {
	v, err := parseHexValue(s, "PCI class", 6)
	return uint32(v), err
}

// parseHexValue parses 1 to digits hex digits, with or without one 0x
// prefix and surrounding white space, naming what in its error.
func parseHexValue(s, what string, digits int) (uint64, error) {
	t := trimHexPrefix(strings.TrimSpace(s))
	if len(t) == 0 || len(t) > digits || !isHex(t) {
		return 0, fmt.Errorf("invalid %s %q: want up to %d hex digits", what, s, digits)
	}
	v, err := strconv.ParseUint(t, 16, 4*digits)
	if err != nil {
		return 0, fmt.Errorf("invalid %s %q: %w", what, s, err)
	}
	return v, nil
}
