package vgpuconfig

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testConfig has three configs; small's entries pick GPUs by index or by
// device id.
const testConfig = `version: v1
vgpu-configs:
  none:
    - devices: all
      vgpu-devices: {}
  small:
    - device-filter: "0x223610DE"
      devices: all
      vgpu-devices: {"A10-2Q": 12}
    - devices: [1]
      vgpu-devices: {"A100-4C": 10}
    - vgpu-devices: {"L40S-8Q": 4, "L40S-8A": 2}
      device-filter: ["0x26B910DE"]
      devices: all
  default:
    - devices: all
      vgpu-devices: {"A10-12Q": 2}
`

func parse(t testing.TB, text string) *Config {
	t.Helper()
	c, err := Parse("test.yaml", []byte(text))
	require.NoError(t, err)
	return c
}

func TestParseConfig(t *testing.T) {
	c := parse(t, testConfig)
	assert.Equal(t, "v1", c.Version)
	require.Len(t, c.Configs["small"], 3)
	e := c.Configs["small"][2]
	assert.True(t, e.AllDevices)
	assert.Equal(t, []DeviceID{{Device: 0x26b9, Vendor: 0x10de}}, e.Filters)
	assert.Equal(t, map[string]int{"L40S-8Q": 4, "L40S-8A": 2}, e.VGPUs)
	assert.Equal(t, 2, e.Index)
	two := parse(t, "version: v1\nvgpu-configs:\n  x:\n    - devices: [0, 2]\n      device-filter: [\"0x223610de\", \"0x26B910DE\"]\n      vgpu-devices: {A10-4Q: 1, A10-8Q: 0}\n")
	assert.Equal(t, []int{0, 2}, two.Configs["x"][0].Devices)
	assert.Len(t, two.Configs["x"][0].Filters, 2)
	assert.Equal(t, map[string]int{"A10-4Q": 1}, two.Configs["x"][0].VGPUs, "a zero count is no vGPU")
	assert.Equal(t, "0x223610DE", two.Configs["x"][0].Filters[0].String())
	assert.True(t, c.Configs["small"][1].Matches(1, DeviceID{Device: 0x20f1, Vendor: 0x10de}))
	assert.False(t, c.Configs["small"][1].Matches(0, DeviceID{Device: 0x20f1, Vendor: 0x10de}), "another index")
	assert.False(t, e.Matches(0, DeviceID{Device: 0x2236, Vendor: 0x10de}), "another device")
}

// TestConfigErrorsNameFileConfigAndKey: every way a file can be wrong is a
// vgpuconfig.Error (exit 1) naming the file, the config and the key.
func TestConfigErrorsNameFileConfigAndKey(t *testing.T) {
	entry := func(body string) string {
		return "version: v1\nvgpu-configs:\n  cfg:\n    - " + body + "\n"
	}
	for _, c := range []struct {
		name, text, config, key, msg string
	}{
		{"not yaml", "version: [", "", "", "not valid YAML"},
		{"top not a map", "- a\n", "", "", "want a map"},
		{"unknown top key", "version: v1\nvgpu-configs: {a: [{devices: all, vgpu-devices: {}}]}\nmig-configs: {}\n", "", "mig-configs", "unknown key"},
		{"unknown version", "version: v2\nvgpu-configs: {a: [{devices: all, vgpu-devices: {}}]}\n", "", "version", `unknown version "v2"`},
		{"version not string", "version: 1\nvgpu-configs: {a: [{devices: all, vgpu-devices: {}}]}\n", "", "version", "want a string"},
		{"missing version", "vgpu-configs: {a: [{devices: all, vgpu-devices: {}}]}\n", "", "version", "missing"},
		{"missing configs", "version: v1\n", "", "vgpu-configs", "missing"},
		{"empty configs", "version: v1\nvgpu-configs: {}\n", "", "vgpu-configs", "no configs"},
		{"configs not a map", "version: v1\nvgpu-configs: [a]\n", "", "vgpu-configs", "want a map"},
		{"duplicate key", "version: v1\nversion: v1\nvgpu-configs: {a: [{devices: all, vgpu-devices: {}}]}\n", "", "", "not valid YAML"},
		{"config not a list", "version: v1\nvgpu-configs:\n  cfg: {devices: all}\n", "cfg", "vgpu-configs.cfg", "want a list"},
		{"empty config", "version: v1\nvgpu-configs:\n  cfg: []\n", "cfg", "vgpu-configs.cfg", "no entries"},
		{"unknown entry key", entry("{devices: all, vgpu-devices: {}, mig-devices: {}}"), "cfg", "vgpu-configs.cfg[0].mig-devices", "unknown key"},
		{"devices word", entry("{devices: some, vgpu-devices: {}}"), "cfg", "vgpu-configs.cfg[0].devices", `got "some"`},
		{"devices type", entry("{devices: {a: 1}, vgpu-devices: {}}"), "cfg", "vgpu-configs.cfg[0].devices", "want all or a list"},
		{"devices negative", entry("{devices: [-1], vgpu-devices: {}}"), "cfg", "vgpu-configs.cfg[0].devices", "invalid GPU index -1"},
		{"devices missing", entry("{vgpu-devices: {}}"), "cfg", "vgpu-configs.cfg[0].devices", "missing"},
		{"filter form", entry(`{devices: all, device-filter: "2236", vgpu-devices: {}}`), "cfg", "vgpu-configs.cfg[0].device-filter", "0x<device><vendor>"},
		{"filter type", entry(`{devices: all, device-filter: {a: 1}, vgpu-devices: {}}`), "cfg", "vgpu-configs.cfg[0].device-filter", "want a device id"},
		{"vgpu-devices missing", entry("{devices: all}"), "cfg", "vgpu-configs.cfg[0].vgpu-devices", "missing"},
		{"vgpu-devices type", entry("{devices: all, vgpu-devices: [A10-4Q]}"), "cfg", "vgpu-configs.cfg[0].vgpu-devices", "want a map"},
		{"bad type name", entry("{devices: all, vgpu-devices: {A10: 2}}"), "cfg", "vgpu-configs.cfg[0].vgpu-devices.A10", "invalid vGPU type"},
		{"count type", entry("{devices: all, vgpu-devices: {A10-4Q: two}}"), "cfg", "vgpu-configs.cfg[0].vgpu-devices.A10-4Q", "want a count"},
		{"count fraction", entry("{devices: all, vgpu-devices: {A10-4Q: 1.5}}"), "cfg", "vgpu-configs.cfg[0].vgpu-devices.A10-4Q", "want a count"},
		{"count negative", entry("{devices: all, vgpu-devices: {A10-4Q: -1}}"), "cfg", "vgpu-configs.cfg[0].vgpu-devices.A10-4Q", "want a count"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("/etc/vgpu/config.yaml", []byte(c.text))
			require.Error(t, err)
			var ce *Error
			require.True(t, errors.As(err, &ce), "%T %v", err, err)
			assert.Equal(t, "/etc/vgpu/config.yaml", ce.File)
			assert.Equal(t, c.config, ce.Config)
			assert.Equal(t, c.key, ce.Key)
			assert.Contains(t, err.Error(), c.msg)
			assert.Contains(t, err.Error(), "/etc/vgpu/config.yaml")
			assert.Equal(t, 1, ce.ExitCode())
		})
	}
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.True(t, IsError(err))
	assert.Contains(t, err.Error(), "missing.yaml")
}

func TestSelectUnknownConfig(t *testing.T) {
	c := parse(t, testConfig)
	_, err := c.Select("large")
	require.Error(t, err)
	assert.True(t, IsError(err))
	assert.Contains(t, err.Error(), `config "large"`)
	assert.Contains(t, err.Error(), "the file has default, none, small")
}

// FuzzParseConfig: any input parses or fails with an Error, never a
// panic; what parses holds only valid names, counts and indexes.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(testConfig))
	f.Add(DefaultYAML()[:2000])
	f.Add([]byte("version: v1\nvgpu-configs: {a: [{devices: [0, 1], device-filter: [\"0x223610DE\"], vgpu-devices: {A10-4Q: 2}}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !IsError(err) {
				t.Fatalf("not an Error: %T %v", err, err)
			}
			return
		}
		if c.Version != Version || len(c.Configs) == 0 {
			t.Fatalf("parsed without version or configs: %+v", c)
		}
		for name, entries := range c.Configs {
			if len(entries) == 0 {
				t.Fatalf("config %q without entries", name)
			}
			for _, e := range entries {
				for typ, n := range e.VGPUs {
					if _, err := ParseTypeName(typ); err != nil || n <= 0 {
						t.Fatalf("config %q: %q: %d (%v)", name, typ, n, err)
					}
				}
				for _, d := range e.Devices {
					if d < 0 {
						t.Fatalf("config %q: index %d", name, d)
					}
				}
			}
		}
	})
}
