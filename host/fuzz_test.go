package host

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{
		"0000:3b:00.0", "3b:00.0", "0000:3B:00.1", "0009:01:00.0", "10000:e1:00.0", "ffff:ff:1f.7",
		"../../x", "0000:3b:00.0/..", "0000:3b:20.0", "0000:3b:00.8", "", " 0000:af:00.0\n", "0000:3b:00.0\x00",
	} {
		f.Add(s)
	}
	root := filepath.Join(string(filepath.Separator), "sys", "bus", "pci", "devices")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			if a != "" {
				t.Fatalf("ParseAddress(%q) returned %q with error %v", s, a, err)
			}
			return
		}
		again, err := ParseAddress(string(a))
		if err != nil || again != a {
			t.Fatalf("ParseAddress(%q) = %q does not re-parse to itself: %q, %v", s, a, again, err)
		}
		if strings.ContainsAny(string(a), "/\\\x00 ") {
			t.Fatalf("ParseAddress(%q) = %q contains a separator", s, a)
		}
		p := filepath.Join(root, string(a))
		if filepath.Dir(p) != root {
			t.Fatalf("ParseAddress(%q) = %q escapes %s: %s", s, a, root, p)
		}
		if !isPCIFunctionName(string(a)) {
			t.Fatalf("canonical address %q is not a PCI function name", a)
		}
	})
}

func FuzzParseID(f *testing.F) {
	for _, s := range []string{"10de", "0x10de\n", "0X15B3", "0x", "0x0x10", "ffff", "10000", "-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseID(s)
		if err != nil {
			return
		}
		for _, form := range []string{fmt.Sprintf("0x%04x", v), fmt.Sprintf("%04X", v)} {
			back, err := ParseID(form)
			if err != nil || back != v {
				t.Fatalf("ParseID(%q) = %#x; %q re-parses to %#x, %v", s, v, form, back, err)
			}
		}
		if c, err := ParseClass(s); err != nil || c != uint32(v) {
			t.Fatalf("ParseID(%q) = %#x but ParseClass = %#x, %v", s, v, c, err)
		}
	})
}

func FuzzParseModalias(f *testing.F) {
	for _, s := range []string{
		a10Modalias, gh200Modalias, audioModalias, strings.ToLower(a10Modalias), a10Modalias + "\n",
		"pci:v000010DEd*sv*sd*bc03sc*i*", "usb:v1D6Bp0002", "pci:", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseModalias(s)
		if err != nil {
			return
		}
		out := m.String()
		if !strings.EqualFold(out, strings.TrimSpace(s)) {
			t.Fatalf("ParseModalias(%q).String() = %q", s, out)
		}
		back, err := ParseModalias(out)
		if err != nil || back != m {
			t.Fatalf("ParseModalias(%q) = %+v; String %q re-parses to %+v, %v", s, m, out, back, err)
		}
	})
}

func FuzzParseAliases(f *testing.F) {
	for _, s := range []string{
		"# Aliases extracted from modules themselves.\nalias pci:v000010DEd*sv*sd*bc03sc*i* nvidia\n",
		"alias vfio_pci:v000010DEd00002342sv*sd*bc*sc*i* nvgrace_gpu_vfio_pci\nalias fs-ext4 ext4\n",
		"alias pci:v* a b\n", "\n\n#x\n", "alias\tpci:v*d*\tx\r\n", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		as, err := ParseAliases(strings.NewReader(s))
		if err != nil {
			if as != nil {
				t.Fatalf("ParseAliases returned aliases with error %v", err)
			}
			if !strings.Contains(err.Error(), "line ") && !strings.Contains(err.Error(), "read modules.alias") {
				t.Fatalf("error names no line: %v", err)
			}
			return
		}
		for _, a := range as {
			if !strings.HasPrefix(a.Pattern, "pci:") && !strings.HasPrefix(a.Pattern, "vfio_pci:") {
				t.Fatalf("alias %+v is neither pci: nor vfio_pci:", a)
			}
			if a.Module == "" || strings.ContainsAny(a.Pattern+a.Module, " \t\n") {
				t.Fatalf("alias %+v has an empty module or whitespace", a)
			}
		}
	})
}

func FuzzAliasMatches(f *testing.F) {
	f.Add("pci:v000010DEd*sv*sd*bc03sc*i*", a10Modalias)
	f.Add("vfio_pci:v000010DEd00002342sv*sd*bc*sc*i*", gh200Modalias)
	f.Add("vfio_pci:v*d*sv*sd*bc*sc*i*", audioModalias)
	f.Add("pci:v[", "pci:v[")
	f.Add("pci:v\\", "pci:v")
	f.Add("vfio_pci:*", "")
	f.Fuzz(func(t *testing.T, pattern, modalias string) {
		a := Alias{Pattern: pattern, Module: "m"}
		got := a.Matches(modalias)
		if got && a.IsVFIO() && !strings.HasPrefix(modalias, "pci:") {
			t.Fatalf("vfio alias %q matched non-pci modalias %q", pattern, modalias)
		}
		if !a.IsVFIO() && !strings.ContainsAny(pattern, "*?[\\") && got != (pattern == modalias) {
			t.Fatalf("literal pattern %q vs %q: Matches = %v", pattern, modalias, got)
		}
		_, _ = BestMatch([]Alias{a}, modalias, a.IsVFIO())
	})
}
