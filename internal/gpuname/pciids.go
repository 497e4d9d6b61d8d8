package gpuname

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// ErrPCIIDs marks a pci.ids file that is not in the pci.ids format.
var ErrPCIIDs = errors.New("not in the pci.ids format")

// SystemPCIIDs are the usual locations of pci.ids, searched in order when
// no file is given (Fedora's hwdata, Debian's pci.ids package).
func SystemPCIIDs() []string {
	return []string{
		"/usr/share/hwdata/pci.ids", "/usr/share/misc/pci.ids",
		"/usr/share/hwdata/pci.ids.gz", "/usr/share/misc/pci.ids.gz",
	}
}

// maxPCIIDsLine bounds one line (the longest in pci.ids is ~150 bytes).
const maxPCIIDsLine = 4096

// ReadPCIIDs reads a pci.ids file (gzip-compressed when its name ends in
// .gz) with ParsePCIIDs.
func ReadPCIIDs(path string, vendors []uint16) (map[uint32]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pci.ids %s: %w", path, err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("pci.ids %s: %w", path, err)
		}
		defer z.Close()
		r = z
	}
	return ParsePCIIDs(r, path, vendors)
}

// ParsePCIIDs reads pci.ids text in one pass and returns the device names
// of the given vendors, keyed by vendor<<16|device. Every line is checked
// against the format (https://pci-ids.ucw.cz/): comments, vendors
// ("10de  NVIDIA Corporation"), their devices ("\t2236  GA102GL [A10]")
// and subsystems ("\t\t10de 1482  A10"), classes ("C 03  Display
// controller"), their subclasses and programming interfaces. The first
// line that is not fails the whole file, with an error naming name and
// the line; names of other vendors are checked, not kept.
func ParsePCIIDs(r io.Reader, name string, vendors []uint16) (map[uint32]string, error) {
	serve := map[uint16]bool{}
	for _, v := range vendors {
		serve[v] = true
	}
	out := map[uint32]string{}
	firstLine := map[uint32]int{} // where each kept device was named
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxPCIIDsLine)
	const (
		none = iota
		inVendor
		inDevice
		inClass
		inSubclass
	)
	state, vendor, device := none, uint16(0), uint16(0)
	n := 0
	bad := func(what, want string, line []byte) error {
		return fmt.Errorf("pci.ids %s: line %d: %w: %s %q: want %s", name, n, ErrPCIIDs, what, truncate(line), want)
	}
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if !utf8.Valid(line) {
			return nil, fmt.Errorf("pci.ids %s: line %d: %w: invalid UTF-8", name, n, ErrPCIIDs)
		}
		tabs := 0
		for tabs < len(line) && tabs < 3 && line[tabs] == '\t' {
			tabs++
		}
		body := line[tabs:]
		switch {
		case tabs == 0 && len(body) > 0 && body[0] == 'C' && (len(body) == 1 || body[1] == ' '):
			if _, _, ok := idAndName(body[min(2, len(body)):], 2); !ok {
				return nil, bad("class", `"C", a space, 2 hex digits, two spaces and a name`, line)
			}
			state = inClass
		case tabs == 0:
			id, _, ok := idAndName(body, 4)
			if !ok {
				return nil, bad("vendor", "4 hex digits, two spaces and a name", line)
			}
			state, vendor = inVendor, uint16(id)
		case tabs == 1 && (state == inClass || state == inSubclass):
			if _, _, ok := idAndName(body, 2); !ok {
				return nil, bad("subclass", "a tab, 2 hex digits, two spaces and a name", line)
			}
			state = inSubclass
		case tabs == 1 && (state == inVendor || state == inDevice):
			id, text, ok := idAndName(body, 4)
			if !ok {
				return nil, bad("device", "a tab, 4 hex digits, two spaces and a name", line)
			}
			state, device = inDevice, uint16(id)
			if serve[vendor] {
				k := key(vendor, device)
				if at, dup := firstLine[k]; dup {
					return nil, fmt.Errorf("pci.ids %s: line %d: %w: device %04x:%04x is already named on line %d", name, n, ErrPCIIDs, vendor, device, at)
				}
				out[k], firstLine[k] = string(text), n
			}
		case tabs == 2 && state == inSubclass:
			if _, _, ok := idAndName(body, 2); !ok {
				return nil, bad("programming interface", "two tabs, 2 hex digits, two spaces and a name", line)
			}
		case tabs == 2 && state == inDevice:
			_, rest, ok := hexPrefix(body, 4)
			if !ok || len(rest) == 0 || rest[0] != ' ' {
				return nil, bad("subsystem", "two tabs, 4 hex digits, a space, 4 hex digits, two spaces and a name", line)
			}
			if _, _, ok := idAndName(rest[1:], 4); !ok {
				return nil, bad("subsystem", "two tabs, 4 hex digits, a space, 4 hex digits, two spaces and a name", line)
			}
		default:
			return nil, fmt.Errorf("pci.ids %s: line %d: %w: %q: %d tabs where no %s opens it", name, n, ErrPCIIDs, truncate(line), tabs, parentOf(tabs))
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("pci.ids %s: line %d: %w: longer than %d bytes", name, n+1, ErrPCIIDs, maxPCIIDsLine)
		}
		return nil, fmt.Errorf("pci.ids %s: line %d: %w", name, n+1, err)
	}
	return out, nil
}

// idAndName splits "<digits hex>  <name>"; the name must be printable
// (no control characters) and not empty.
func idAndName(b []byte, digits int) (uint32, []byte, bool) {
	id, rest, ok := hexPrefix(b, digits)
	if !ok || !bytes.HasPrefix(rest, []byte("  ")) {
		return 0, nil, false
	}
	text := rest[2:]
	if len(bytes.TrimSpace(text)) == 0 {
		return 0, nil, false
	}
	for _, c := range text {
		if c < 0x20 || c == 0x7f {
			return 0, nil, false
		}
	}
	return id, text, true
}

// hexPrefix reads exactly digits hex digits.
func hexPrefix(b []byte, digits int) (uint32, []byte, bool) {
	if len(b) < digits {
		return 0, nil, false
	}
	var v uint32
	for _, c := range b[:digits] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint32(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint32(c-'A'+10)
		default:
			return 0, nil, false
		}
	}
	return v, b[digits:], true
}

func parentOf(tabs int) string {
	switch tabs {
	case 1:
		return "vendor or class line"
	case 2:
		return "device or subclass line"
	}
	return "line (at most two tabs)"
}

// truncate keeps an error message short whatever the line.
func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
