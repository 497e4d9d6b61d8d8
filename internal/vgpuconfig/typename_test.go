package vgpuconfig

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTypeName(t *testing.T) {
	for s, want := range map[string]TypeName{
		"A10-4Q":          {Product: "A10", SizeGB: 4, Series: "Q"},
		"A100-1-5C":       {Product: "A100", GPUInstance: 1, SizeGB: 5, Series: "C"},
		"A30-1-6CME":      {Product: "A30", GPUInstance: 1, SizeGB: 6, Series: "CME"},
		"RTX6000-Ada-24Q": {Product: "RTX6000-Ada", SizeGB: 24, Series: "Q"},
		"H100L-94C":       {Product: "H100L", SizeGB: 94, Series: "C"},
		"L40S-3B":         {Product: "L40S", SizeGB: 3, Series: "B"},
	} {
		got, err := ParseTypeName(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
		assert.Equal(t, s, got.String())
	}
	for _, bad := range []string{"", "A10", "A10-", "A10-Q", "A10-4q", "-4Q", "a10-4Q", "A10 4Q", "A10-0Q", "../x-4Q"} {
		_, err := ParseTypeName(bad)
		assert.Error(t, err, bad)
	}
}

func TestDeviceID(t *testing.T) {
	id, err := ParseDeviceID("0x223610DE")
	require.NoError(t, err)
	assert.Equal(t, DeviceID{Device: 0x2236, Vendor: 0x10de}, id)
	assert.Equal(t, "0x223610DE", id.String())
	for _, bad := range []string{"223610DE", "0x2236", "0xZZZZ10DE", "0x223610DE00"} {
		_, err := ParseDeviceID(bad)
		assert.Error(t, err, bad)
	}
}

// TestCatalog: capacities as NVIDIA's documentation and example config
// give them (the catalog holds no type ids: the driver names those).
func TestCatalog(t *testing.T) {
	for _, c := range []struct {
		device uint16
		name   string
		max    int
	}{
		{0x2236, "A10-4Q", 6}, {0x2236, "A10-1Q", 24}, {0x2235, "A40-1Q", 32}, {0x2235, "A40-2Q", 24},
		{0x25b6, "A16-1Q", 16}, {0x25b6, "A2-8Q", 2}, {0x20b7, "A30-12C", 2}, {0x20f1, "A100-5C", 8},
		{0x20b5, "A100D-16C", 5}, {0x2321, "H100L-4C", 23}, {0x2330, "H100XM-40C", 2}, {0x26b9, "L40S-24Q", 2},
		{0x27b8, "L4-12Q", 2}, {0x1eb8, "T4-16Q", 1}, {0x2236, "A10-5Q", 0}, {0x9999, "X-1Q", 0},
	} {
		assert.Equal(t, c.max, CatalogMax(c.device, c.name), "%s on %04x", c.name, c.device)
	}
	assert.True(t, TypeLess("A10-4Q", "A10-12Q"))
	assert.True(t, TypeLess("A10-24C", "A10-1Q"))
}
