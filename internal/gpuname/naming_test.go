package gpuname

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeriveNameFollowsTheGPUOperatorRule(t *testing.T) {
	cases := map[string]string{
		"GA102GL [A10]":                  "GA102GL_A10",
		"TU104GL [Tesla T4]":             "TU104GL_TESLA_T4",
		"GH100[H100 SXM5 80GB]":          "GH100H100_SXM5_80GB",
		"GH100 [H100 SXM5 80GB]":         "GH100_H100_SXM5_80GB",
		"GA107GL [A2 / A16]":             "GA107GL_A2___A16",
		"GV100GL [Tesla V100 PCIe 16GB]": "GV100GL_TESLA_V100_PCIE_16GB",
		"Foo  1.5\t(rev b)":              "FOO_1_5_REV_B",
		"":                               "",
	}
	for in, want := range cases {
		assert.Equal(t, want, DeriveName(in), "%q", in)
	}
}

func writePCIIDs(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pci.ids")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

// An old pci.ids (Debian 2023) spells 2330 without a space and lacks 2335.
const oldPCIIDs = `# pci.ids excerpt
10de  NVIDIA Corporation
	2230  GA102GL [RTX A6000]
	2236  GA102GL [A10]
	2321  GH100
	2330  GH100[H100 SXM5 80GB]
	9999  Made Up [Test.Card / X]
`

func TestNamesArePinnedWhateverPCIIDs(t *testing.T) {
	n, err := NewNamer(writePCIIDs(t, oldPCIIDs), "")
	require.NoError(t, err)
	cases := []struct {
		device       uint16
		name, source string
	}{
		{0x2236, "GA102GL_A10", "curated"},
		{0x2330, "GH100_H100_SXM5_80GB", "curated"},
		{0x2335, "GH100_H200_SXM_141GB", "curated"},
		{0x1eb8, "TU104GL_TESLA_T4", "curated"},
		{0x2230, "GA102GL_RTX_A6000", "pci.ids"},
		{0x9999, "MADE_UP_TEST_CARD___X", "pci.ids"},
		{0x1234, "PCI_10DE_1234", "ids"},
	}
	for _, c := range cases {
		name, source := n.Name(0x10de, c.device)
		assert.Equal(t, c.name, name, "%04x", c.device)
		assert.Equal(t, c.source, source, "%04x", c.device)
	}
}

func TestNameOverrides(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "names.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("\"10DE:2236\": A10_FLEET\n10de:2330: H100\n"), 0o644))
	n, err := NewNamer(writePCIIDs(t, oldPCIIDs), cfg)
	require.NoError(t, err)
	name, source := n.Name(0x10de, 0x2236)
	assert.Equal(t, "A10_FLEET", name)
	assert.Equal(t, "override", source)
	name, _ = n.Name(0x10de, 0x2330)
	assert.Equal(t, "H100", name)

	bad := map[string]string{
		"key":  "nvidia-2236: X\n",
		"name": "10de:2236: \"not valid/name\"\n",
		"yaml": "10de:2236: [\n",
	}
	for what, body := range bad {
		p := filepath.Join(dir, what+".yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		_, err := NewNamer("", p)
		require.Error(t, err, what)
		assert.Contains(t, err.Error(), p, "the error names the file")
	}
	_, err = NewNamer("/nonexistent/pci.ids", "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/nonexistent/pci.ids")
}

var resourceSafe = regexp.MustCompile(`^[A-Z0-9_]*$`)

func FuzzDeriveName(f *testing.F) {
	for _, s := range []string{"GA102GL [A10]", "GH100[H100 SXM5 80GB]", "GA107GL [A2 / A16]", "ünï cödé\u00a0x", "a.b/c d\te\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := DeriveName(s)
		if !resourceSafe.MatchString(n) {
			t.Fatalf("DeriveName(%q) = %q has characters outside [A-Z0-9_]", s, n)
		}
		if again := DeriveName(n); again != n {
			t.Fatalf("DeriveName is not stable: %q -> %q -> %q", s, n, again)
		}
	})
}

func TestCuratedDeviceInvertsTheTable(t *testing.T) {
	for id := range curated {
		name := DeriveName(curated[id])
		got, ok := CuratedDevice(name)
		assert.True(t, ok, name)
		assert.Equal(t, id, got, name)
	}
	_, ok := CuratedDevice("GA102GL_RTX_A6000")
	assert.False(t, ok)
}
