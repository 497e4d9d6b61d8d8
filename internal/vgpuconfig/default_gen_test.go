package vgpuconfig

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// defaultDevices are the device ids of the built-in config's default, in
// file order: the data-centre GPUs of the catalog.
var defaultDevices = []uint16{0x2236, 0x2235, 0x25b6, 0x20b7, 0x20f1, 0x20b5, 0x20b8, 0x20b0, 0x20b2,
	0x27b8, 0x26b5, 0x26b9, 0x2331, 0x2330, 0x2321, 0x2335, 0x233b, 0x2901, 0x2bb5, 0x1eb8, 0x1db4}

// generateDefaultConfig renders default-config.yaml from the catalog.
func generateDefaultConfig() string {
	var b strings.Builder
	b.WriteString(`# The vGPU device manager's built-in config, in NVIDIA vgpu-device-manager's
# format. Generated from internal/vgpuconfig/catalog.go (NVIDIA's vGPU documentation) by
#   VGPU_UPDATE_DEFAULT_CONFIG=1 go test ./internal/vgpuconfig -run TestDefaultConfig
# Each config named after a vGPU type fills every GPU with that type; "default"
# gives each known data-centre GPU two vGPUs of half its framebuffer, as
# NVIDIA's default does. Select one with the node label nvidia.com/vgpu.config.
version: v1
vgpu-configs:
`)
	seen := map[string]bool{}
	var types []CatalogType
	for _, d := range defaultDevices {
		for _, p := range catalogFor(d) {
			if !seen[p.Name] {
				seen[p.Name] = true
				types = append(types, p.types()...)
			}
		}
	}
	slices.SortFunc(types, func(a, b CatalogType) int {
		if TypeLess(a.Name, b.Name) {
			return -1
		}
		return 1
	})
	for _, t := range types {
		fmt.Fprintf(&b, "  %s:\n    - devices: all\n      vgpu-devices:\n        %s: %d\n", t.Name, t.Name, t.Max)
	}
	b.WriteString("  default:\n")
	for _, d := range defaultDevices {
		for _, p := range catalogFor(d) {
			series := "Q"
			if _, ok := p.Series["Q"]; !ok {
				series = "C"
			}
			fmt.Fprintf(&b, "    - device-filter: %q\n      devices: all\n      vgpu-devices:\n        %s-%d%s: 2\n",
				DeviceID{Device: d, Vendor: 0x10de}.String(), p.Name, p.FramebufferGB/2, series)
		}
	}
	return b.String()
}

// TestDefaultConfig checks that the shipped file is the catalog's, parses
// strictly, and that every type its default names exists in the catalog
// with that capacity.
func TestDefaultConfig(t *testing.T) {
	want := generateDefaultConfig()
	if os.Getenv("VGPU_UPDATE_DEFAULT_CONFIG") == "1" {
		require.NoError(t, os.WriteFile("default-config.yaml", []byte(want), 0o644))
	}
	require.Equal(t, want, defaultConfigYAML, "default-config.yaml is stale: run VGPU_UPDATE_DEFAULT_CONFIG=1 go test ./internal/vgpuconfig -run TestDefaultConfig")
	cfg, err := Default()
	require.NoError(t, err)
	def, err := cfg.Select(DefaultName)
	require.NoError(t, err)
	assert.Len(t, def, len(defaultDevices)+1, "one entry per device id, two for 25b6 (A16 and A2)")
	for _, e := range def {
		require.Len(t, e.Filters, 1)
		for typ, n := range e.VGPUs {
			assert.Equal(t, 2, n)
			assert.NotZero(t, CatalogMax(e.Filters[0].Device, typ), "%s on %s", typ, e.Filters[0])
		}
	}
	a10, err := cfg.Select("A10-4Q")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"A10-4Q": 6}, a10[0].VGPUs, "as NVIDIA's example config")
	a40, err := cfg.Select("A40-1Q")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"A40-1Q": 32}, a40[0].VGPUs, "at most 32 vGPUs per GPU")
	h100l, err := cfg.Select("H100L-4C")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"H100L-4C": 23}, h100l[0].VGPUs)
}
