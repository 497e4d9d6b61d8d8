package host

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	a10Modalias   = "pci:v000010DEd00002236sv000010DEsd0000148Fbc03sc02i00"
	gh200Modalias = "pci:v000010DEd00002342sv000010DEsd000016EBbc03sc02i00"
	audioModalias = "pci:v000010DEd00001AEFsv000010DEsd00001459bc04sc03i00"
)

func TestParseModalias(t *testing.T) {
	m, err := ParseModalias(a10Modalias + "\n")
	require.NoError(t, err)
	assert.Equal(t, Modalias{Vendor: 0x10de, Device: 0x2236, SubVendor: 0x10de, SubDevice: 0x148f,
		BaseClass: 0x03, SubClass: 0x02, ProgIf: 0x00}, m)
	assert.Equal(t, a10Modalias, m.String())

	lower, err := ParseModalias(strings.ToLower(a10Modalias))
	require.NoError(t, err)
	assert.Equal(t, m, lower, "hex digits are case-insensitive")

	for _, s := range []string{a10Modalias, gh200Modalias, audioModalias,
		"pci:vFFFFFFFFdFFFFFFFFsvFFFFFFFFsdFFFFFFFFbcFFscFFiFF"} {
		m, err := ParseModalias(s)
		require.NoError(t, err, s)
		assert.Equal(t, s, m.String(), "round trip")
	}
	zero := Modalias{}
	back, err := ParseModalias(zero.String())
	require.NoError(t, err)
	assert.Equal(t, zero, back)
}

func TestParseModaliasRejects(t *testing.T) {
	cases := map[string]string{
		"empty":          "",
		"no prefix":      "v000010DEd00002236sv000010DEsd0000148Fbc03sc02i00",
		"usb modalias":   "usb:v1D6Bp0002d0606dc09dsc00dp01ic09isc00ip00in00",
		"vfio form":      "vfio_pci:v000010DEd00002236sv000010DEsd0000148Fbc03sc02i00",
		"short vendor":   "pci:v10DEd00002236sv000010DEsd0000148Fbc03sc02i00",
		"trailing":       a10Modalias + "x",
		"missing progif": "pci:v000010DEd00002236sv000010DEsd0000148Fbc03sc02",
		"wildcard":       "pci:v000010DEd*sv*sd*bc03sc*i*",
		"non-hex":        "pci:v000010DGd00002236sv000010DEsd0000148Fbc03sc02i00",
		"signed":         "pci:v+00010DEd00002236sv000010DEsd0000148Fbc03sc02i00",
		"fields swapped": "pci:d00002236v000010DEsv000010DEsd0000148Fbc03sc02i00",
		"upper keys":     "pci:V000010DED00002236SV000010DESD0000148FBC03SC02I00",
	}
	for name, s := range cases {
		_, err := ParseModalias(s)
		assert.Error(t, err, name)
	}
}

func TestParseAliases(t *testing.T) {
	text := `# Aliases extracted from modules themselves.
alias fs-ext4 ext4
alias char-major-10-196 vfio

alias pci:v000010DEd*sv*sd*bc03sc*i* nvidia
   alias  pci:v000010DEd*sv*sd*bc04sc03i00   snd_hda_intel
alias usb:v*p*d*dc*dsc*dp*ic09isc*ip*in* usbcore
alias vfio_pci:v000010DEd00002342sv*sd*bc*sc*i* nvgrace_gpu_vfio_pci
alias vfio_pci:v*d*sv*sd*bc*sc*i* vfio_pci
alias acpi*:NVDA8000:* nvidia
`
	as, err := ParseAliases(strings.NewReader(text))
	require.NoError(t, err)
	assert.Equal(t, []Alias{
		{Pattern: "pci:v000010DEd*sv*sd*bc03sc*i*", Module: "nvidia"},
		{Pattern: "pci:v000010DEd*sv*sd*bc04sc03i00", Module: "snd_hda_intel"},
		{Pattern: "vfio_pci:v000010DEd00002342sv*sd*bc*sc*i*", Module: "nvgrace_gpu_vfio_pci"},
		{Pattern: "vfio_pci:v*d*sv*sd*bc*sc*i*", Module: "vfio_pci"},
	}, as)
	assert.False(t, as[0].IsVFIO())
	assert.True(t, as[2].IsVFIO())

	empty, err := ParseAliases(strings.NewReader(""))
	require.NoError(t, err)
	assert.Empty(t, empty)
}

func TestParseAliasesMalformed(t *testing.T) {
	cases := map[string]struct {
		text string
		line string
	}{
		"missing module": {"# header\nalias pci:v*d* nvidia\nalias pci:v000010DEd*\n", "line 3"},
		"not an alias":   {"alias pci:v* a\nsoftdep nvidia pre: ecdh\n", "line 2"},
		"extra field":    {"\n\nalias pci:v* nvidia extra\n", "line 3"},
		"first line":     {"garbage\n", "line 1"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			as, err := ParseAliases(strings.NewReader(c.text))
			require.Error(t, err)
			assert.Nil(t, as)
			assert.Contains(t, err.Error(), c.line)
		})
	}
}

func TestAliasMatches(t *testing.T) {
	generic := Alias{Pattern: "vfio_pci:v*d*sv*sd*bc*sc*i*", Module: "vfio_pci"}
	variant := Alias{Pattern: "vfio_pci:v000010DEd00002342sv*sd*bc*sc*i*", Module: "nvgrace_gpu_vfio_pci"}
	nvidia := Alias{Pattern: "pci:v000010DEd*sv*sd*bc03sc*i*", Module: "nvidia"}
	anyPCI := Alias{Pattern: "pci:v*d*sv*sd*bc*sc*i*", Module: "pci_stub"}

	assert.True(t, generic.Matches(gh200Modalias))
	assert.True(t, generic.Matches(a10Modalias))
	assert.True(t, variant.Matches(gh200Modalias))
	assert.False(t, variant.Matches(a10Modalias))
	assert.True(t, nvidia.Matches(a10Modalias))
	assert.False(t, nvidia.Matches(audioModalias))
	assert.True(t, anyPCI.Matches(audioModalias))

	// A vfio alias only matches a pci: modalias (rewritten to vfio_pci:).
	assert.False(t, generic.Matches("vfio_pci:v000010DEd00002342sv000010DEsd000016EBbc03sc02i00"))
	assert.False(t, generic.Matches("usb:v1D6Bp0002"))
	assert.False(t, generic.Matches(""))
	// A malformed pattern never matches.
	assert.False(t, Alias{Pattern: "pci:v[", Module: "x"}.Matches("pci:v["))
	// Matching is case-sensitive like fnmatch: the kernel writes upper-case hex.
	assert.False(t, nvidia.Matches(strings.ToLower(a10Modalias)))
}

func TestBestMatch(t *testing.T) {
	generic := Alias{Pattern: "vfio_pci:v*d*sv*sd*bc*sc*i*", Module: "vfio_pci"}
	variant := Alias{Pattern: "vfio_pci:v000010DEd00002342sv*sd*bc*sc*i*", Module: "nvgrace_gpu_vfio_pci"}
	nvidia := Alias{Pattern: "pci:v000010DEd*sv*sd*bc03sc*i*", Module: "nvidia"}
	exact := Alias{Pattern: "pci:v000010DEd00002342sv*sd*bc03sc*i*", Module: "nvidia_exact"}
	anyPCI := Alias{Pattern: "pci:v*d*sv*sd*bc*sc*i*", Module: "pci_stub"}

	for _, order := range [][]Alias{{generic, variant}, {variant, generic}} {
		a, ok := BestMatch(order, gh200Modalias, true)
		require.True(t, ok)
		assert.Equal(t, variant, a, "the variant alias beats the generic one in any order")
	}
	a, ok := BestMatch([]Alias{generic, variant}, a10Modalias, true)
	require.True(t, ok)
	assert.Equal(t, generic, a)

	// Plain pci aliases never count as vfio ones, and vice versa.
	_, ok = BestMatch([]Alias{nvidia, anyPCI, exact}, gh200Modalias, true)
	assert.False(t, ok)
	a, ok = BestMatch([]Alias{generic, variant, anyPCI, nvidia, exact}, gh200Modalias, false)
	require.True(t, ok)
	assert.Equal(t, exact, a)
	a, ok = BestMatch([]Alias{anyPCI, nvidia}, a10Modalias, false)
	require.True(t, ok)
	assert.Equal(t, nvidia, a)

	// Ties keep file order.
	twin := Alias{Pattern: nvidia.Pattern, Module: "nvidia_twin"}
	a, ok = BestMatch([]Alias{nvidia, twin}, a10Modalias, false)
	require.True(t, ok)
	assert.Equal(t, "nvidia", a.Module)

	_, ok = BestMatch(nil, a10Modalias, false)
	assert.False(t, ok)
	_, ok = BestMatch([]Alias{nvidia}, audioModalias, false)
	assert.False(t, ok)
}
