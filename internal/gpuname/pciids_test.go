package gpuname

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const fullPCIIDs = `# header
10de  NVIDIA Corporation
	2236  GA102GL [A10]
		10de 1482  A10
	24fa  GA104 [RTX A4500 Embedded GPU ]
15b3  Mellanox Technologies
	1021  MT2910 Family [ConnectX-7]
C 03  Display controller
	00  VGA compatible controller
		00  VGA controller
	02  3D controller
`

func TestParsePCIIDsKeepsOnlyTheServedVendors(t *testing.T) {
	m, err := ParsePCIIDs(strings.NewReader(fullPCIIDs), "x", []uint16{NVIDIA})
	require.NoError(t, err)
	assert.Equal(t, map[uint32]string{0x10de2236: "GA102GL [A10]", 0x10de24fa: "GA104 [RTX A4500 Embedded GPU ]"}, m)
	m, err = ParsePCIIDs(strings.NewReader(fullPCIIDs), "x", []uint16{0x15b3, NVIDIA})
	require.NoError(t, err)
	assert.Len(t, m, 3)
	m, err = ParsePCIIDs(strings.NewReader(fullPCIIDs), "x", nil)
	require.NoError(t, err)
	assert.Empty(t, m)
}

// TestBadPCIIDsFailClosed: each of these lines crashed pcidb v1.1.1 (short
// lines: "slice bounds out of range" in internal.FromReader, parse.go
// lines 59, 82, 113, 127, 153, 161-162; a device before any vendor: nil
// dereference at line 128) or was read wrong; here each is an error naming
// the file and the line.
func TestBadPCIIDsFailClosed(t *testing.T) {
	cases := map[string]string{
		"short device":       "10de  NVIDIA Corporation\n\t23\n",
		"short vendor":       "10de\n",
		"short class":        "C\n",
		"short subclass":     "C 03  Display\n\t0\n",
		"short prog-if":      "C 03  Display\n\t00  VGA\n\t\t0\n",
		"short subsystem":    "10de  NVIDIA\n\t2236  A10\n\t\t10de\n",
		"device first":       "\t2236  GA102GL [A10]\n",
		"subsystem first":    "10de  NVIDIA\n\t\t10de 1482  A10\n",
		"one space":          "10de NVIDIA Corporation\n",
		"no name":            "10de  NVIDIA\n\t2236  \n",
		"not hex":            "10de  NVIDIA\n\t22zz  X\n",
		"three tabs":         "10de  NVIDIA\n\t2236  A10\n\t\t\t10de 1482  A10\n",
		"control character":  "10de  NVIDIA\n\t2236  A\x0010\n",
		"invalid UTF-8":      "10de  NVIDIA\n\t2236  A\xff10\n",
		"duplicate device":   "10de  NVIDIA\n\t2236  A10\n\t2236  A10 again\n",
		"too long":           "10de  NVIDIA\n\t2236  " + strings.Repeat("x", maxPCIIDsLine) + "\n",
		"space before name":  "10de  NVIDIA\n\t2236   \n",
		"spaces not a tab":   "10de  NVIDIA\n    2236  A10\n",
		"five hex digits":    "10de  NVIDIA\n\t22360  A10\n",
		"class id too short": "C 3  Display\n",
	}
	for what, body := range cases {
		t.Run(what, func(t *testing.T) {
			p := writePCIIDs(t, "# comment\n"+body)
			_, err := NewNamer(p, "")
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrPCIIDs), "%v", err)
			assert.Contains(t, err.Error(), p, "the error names the file")
			lines := strings.Count(strings.TrimSuffix(body, "\n"), "\n") + 2
			assert.Contains(t, err.Error(), fmt.Sprintf("line %d:", lines), "the error names the last line")
		})
	}
}

func TestReadPCIIDsGzip(t *testing.T) {
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	_, err := z.Write([]byte(oldPCIIDs))
	require.NoError(t, err)
	require.NoError(t, z.Close())
	p := filepath.Join(t.TempDir(), "pci.ids.gz")
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o644))
	n, err := NewNamer(p, "")
	require.NoError(t, err)
	name, source := n.Name(NVIDIA, 0x2230)
	assert.Equal(t, "GA102GL_RTX_A6000", name)
	assert.Equal(t, "pci.ids", source)

	require.NoError(t, os.WriteFile(p, []byte(oldPCIIDs), 0o644))
	_, err = NewNamer(p, "")
	require.ErrorContains(t, err, p, "a .gz file that is not gzip")
}

// TestDerivedNamesTheKubeletRefusesGetIDs: the GPU Operator's rule turns
// "GA104 [RTX A4500 Embedded GPU ]" into "GA104_RTX_A4500_EMBEDDED_GPU_",
// which the kubelet refuses as a resource name (and pci.ids has names
// longer than 63 characters).
func TestDerivedNamesTheKubeletRefusesGetIDs(t *testing.T) {
	long := strings.Repeat("Long Name ", 8)
	n, err := NewNamer(writePCIIDs(t, fullPCIIDs+"10de  NVIDIA again\n\t0001  "+long+"\n"), "")
	require.NoError(t, err)
	for dev, want := range map[uint16]string{0x24fa: "PCI_10DE_24FA", 0x0001: "PCI_10DE_0001", 0x2236: "GA102GL_A10"} {
		name, _ := n.Name(NVIDIA, dev)
		assert.Equal(t, want, name)
		assert.NoError(t, ValidResourceName(name))
	}
}

// TestSystemPCIIDs reads the machine's pci.ids (apt-get install pci.ids)
// and names every NVIDIA device in it with a valid resource name.
func TestSystemPCIIDs(t *testing.T) {
	var path string
	for _, p := range SystemPCIIDs() {
		if _, err := os.Stat(p); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		testutil.MissingPeer(t, "no system pci.ids: apt-get install pci.ids (make test-deps does)")
	}
	m, err := ReadPCIIDs(path, []uint16{NVIDIA})
	require.NoError(t, err)
	assert.Greater(t, len(m), 500, "NVIDIA devices in %s", path)
	n, err := NewNamer("", "")
	require.NoError(t, err)
	ids := make([]uint32, 0, len(m))
	for k := range m {
		ids = append(ids, k)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, k := range ids {
		name, _ := n.Name(NVIDIA, uint16(k))
		require.NoError(t, ValidResourceName(name), "%08x %q", k, m[k])
	}
}

// FuzzParsePCIIDs: any input parses or fails with ErrPCIIDs naming the
// file and a line, never a panic; what parses keeps only the served
// vendor, each name exactly as a valid device line of the input has it,
// and re-encoding the result as pci.ids parses back to the same names.
func FuzzParsePCIIDs(f *testing.F) {
	for _, s := range []string{fullPCIIDs, oldPCIIDs, "10de\n", "10de  NVIDIA Corporation\n\t23\n", "\t2236  X\n", "C\n", "C 03  D\n\t0\n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParsePCIIDs(bytes.NewReader(data), "fuzz.ids", []uint16{NVIDIA})
		if err != nil {
			if m != nil || !errors.Is(err, ErrPCIIDs) || !strings.Contains(err.Error(), "pci.ids fuzz.ids: line ") {
				t.Fatalf("error without ErrPCIIDs, file or line (result %v): %v", m, err)
			}
			return
		}
		var b strings.Builder
		b.WriteString("10de  NVIDIA\n")
		ids := make([]uint32, 0, len(m))
		for k := range m {
			ids = append(ids, k)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, k := range ids {
			if k>>16 != NVIDIA {
				t.Fatalf("kept %08x of another vendor", k)
			}
			text := m[k]
			if !bytes.Contains(bytes.ToLower(data), bytes.ToLower([]byte(fmt.Sprintf("\t%04x  %s", k&0xffff, text)))) {
				t.Fatalf("name %q of %08x is not in the input", text, k)
			}
			fmt.Fprintf(&b, "\t%04x  %s\n", k&0xffff, text)
		}
		again, err := ParsePCIIDs(strings.NewReader(b.String()), "again", []uint16{NVIDIA})
		if err != nil || len(again) != len(m) {
			t.Fatalf("re-encoded names do not parse back: %v\n%s", err, b.String())
		}
		for k, v := range m {
			if again[k] != v {
				t.Fatalf("%08x: %q re-parses as %q", k, v, again[k])
			}
		}
	})
}
