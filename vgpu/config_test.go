package vgpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

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
}

// TestConfigErrorsNameFileConfigAndKey: every way a file can be wrong is a
// ConfigError (exit 1) naming the file, the config and the key.
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
			_, err := ParseConfig("/etc/vgpu/config.yaml", []byte(c.text))
			require.Error(t, err)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce), "%T %v", err, err)
			assert.Equal(t, "/etc/vgpu/config.yaml", ce.File)
			assert.Equal(t, c.config, ce.Config)
			assert.Equal(t, c.key, ce.Key)
			assert.Contains(t, err.Error(), c.msg)
			assert.Contains(t, err.Error(), "/etc/vgpu/config.yaml")
			assert.Equal(t, ExitBadInput, ExitCode(err, nil))
			assert.Equal(t, ExitBadInput, ce.ExitCode())
		})
	}
	_, err := LoadConfig(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.True(t, IsConfigError(err))
	assert.Contains(t, err.Error(), "missing.yaml")
}

func TestSelectUnknownConfig(t *testing.T) {
	c := parse(t, testConfig)
	_, err := c.Select("large")
	require.Error(t, err)
	assert.True(t, IsConfigError(err))
	assert.Contains(t, err.Error(), `config "large"`)
	assert.Contains(t, err.Error(), "the file has default, none, small")
	_, h := fixture(t, "a10-vgpu")
	_, err = PlanConfig(context.Background(), h, c, "large", Options{})
	assert.True(t, IsConfigError(err))
}

// TestHostValidation: a type a GPU cannot host, too many instances, mixed
// sizes, a GPU without the vGPU host driver: exit-1 errors naming the
// config, the key and the GPU, and nothing is changed.
func TestHostValidation(t *testing.T) {
	for _, c := range []struct {
		fixture, vgpus, key, msg string
	}{
		{"a10-vgpu", "{A100-10C: 1}", "vgpu-configs.bad[0].vgpu-devices.A100-10C", "this GPU cannot host A100-10C; it can host A10-4C, A10-6C"},
		{"a10-vgpu", "{A10-4Q: 7}", "vgpu-configs.bad[0].vgpu-devices.A10-4Q", "asks for 7 vGPUs of size 4 GB; this GPU holds at most 6 (from mdev description)"},
		{"a10-vgpu", "{A10-4Q: 2, A10-8Q: 1}", "vgpu-configs.bad[0].vgpu-devices", "mixes framebuffer sizes (4 GB: A10-4Q; 8 GB: A10-8Q)"},
		{"a100-sriov-vgpu", "{A100-10C: 5}", "vgpu-configs.bad[0].vgpu-devices.A100-10C", "holds at most 4 (from catalog)"},
		{"a100-sriov-vgpu", "{A10-4Q: 1}", "vgpu-configs.bad[0].vgpu-devices.A10-4Q", "it can host A100-4C, A100-5C"},
		{"l40s-vgpu", "{L40S-1Q: 33}", "vgpu-configs.bad[0].vgpu-devices.L40S-1Q", "holds at most 32 (from catalog)"},
		{"a10", "{A10-4Q: 1}", "vgpu-configs.bad[0].vgpu-devices.A10-4Q", "offers no vGPU types"},
	} {
		t.Run(c.fixture+c.vgpus, func(t *testing.T) {
			k, h := fixture(t, c.fixture)
			cfg := parse(t, "version: v1\nvgpu-configs:\n  bad:\n    - devices: all\n      vgpu-devices: "+c.vgpus+"\n")
			_, err := PlanConfig(context.Background(), h, cfg, "bad", Options{})
			require.Error(t, err)
			var ce *ConfigError
			require.True(t, errors.As(err, &ce), "%v", err)
			assert.Equal(t, "bad", ce.Config)
			assert.Equal(t, c.key, ce.Key)
			assert.Contains(t, ce.GPU, "GPU 0 (")
			assert.Contains(t, err.Error(), c.msg)
			assert.Equal(t, ExitBadInput, ExitCode(err, nil))
			assert.Empty(t, k.Writes())
		})
	}
}

// TestTwoProductsOneID: A2 and A16 are both 10de:25b6; the default's entry
// for the other product is skipped. An entry without device-filter that
// names another product is still an error.
func TestTwoProductsOneID(t *testing.T) {
	k := customHost(t, 0x25b6, hostsim.VGPUCard{PF: "0000:3b:00.0", Mode: hostsim.MdevPF, FramebufferGB: 16,
		Types: []hostsim.VGPUType{{ID: 700, Name: "NVIDIA A16-8Q", SizeGB: 8}, {ID: 701, Name: "NVIDIA A16-4Q", SizeGB: 4}}})
	h := hostOf(k)
	def, err := DefaultConfig()
	require.NoError(t, err)
	res := Apply(t.Context(), h, planOf(t, h, def, DefaultConfigName, Options{}), ApplyOptions{})
	require.True(t, res.OK(), "%v", res.Refused)
	assert.Equal(t, map[string]int{"A16-8Q": 2}, countsOf(t, h)["0000:3b:00.0"])

	_, err = PlanConfig(t.Context(), h, def, "A2-8Q", Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "this GPU cannot host A2-8Q; it can host A16-4Q, A16-8Q")
}

// TestDeferredValidation: an SR-IOV GPU the catalog does not know shows no
// type before its VFs exist; apply enables them, then checks the config
// against what they offer.
func TestDeferredValidation(t *testing.T) {
	card := hostsim.VGPUCard{PF: "0000:3b:00.0", Mode: hostsim.VendorVFIO, FramebufferGB: 32, TotalVFs: 4, VFGroupBase: 90,
		Types: []hostsim.VGPUType{{ID: 900, Name: "NVIDIA X1-16Q", SizeGB: 16}, {ID: 901, Name: "NVIDIA X1-8Q", SizeGB: 8}}}
	cfg := parse(t, "version: v1\nvgpu-configs:\n  ok:\n    - devices: all\n      vgpu-devices: {X1-16Q: 2}\n  bad:\n    - devices: all\n      vgpu-devices: {X1-4Q: 2}\n")
	k := customHost(t, 0x9999, card)
	h := hostOf(k)
	nvml := TypeNamesFunc(func(gpu host.Address) (map[int]string, error) {
		assert.Equal(t, host.Address("0000:3b:00.0"), gpu)
		return map[int]string{900: "NVIDIA X1-16Q", 901: "NVIDIA X1-8Q"}, nil
	})
	o := Options{TypeNames: nvml}
	p := planOf(t, h, cfg, "ok", o)
	require.True(t, p.GPUs[0].Deferred)
	res := Apply(t.Context(), h, p, ApplyOptions{})
	require.True(t, res.OK(), "%v", res.Refused)
	gpus, err := Inventory(h, nvml)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"X1-16Q": 2}, gpus[0].counts(), "a full card: the TypeNamer names the ids")
	assert.Equal(t, map[string]int{"": 2}, countsOf(t, h)["0000:3b:00.0"], "without it they cannot be named")
	again := planOf(t, h, cfg, "ok", o)
	assert.False(t, again.Changes(), "named, they match: nothing to do")
	refused := planOf(t, h, cfg, "ok", Options{}).Refusals()
	require.Len(t, refused, 1, "unnamed, they are never removed on a guess")
	assert.Contains(t, refused[0].Reason, "unknown vGPU type")
	assert.Equal(t, []string{"4", "900", "900"}, append(dataOf(k, "/sriov_numvfs"), dataOf(k, "/current_vgpu_type")...),
		"type ids read from creatable_vgpu_types at apply time")

	k2 := customHost(t, 0x9999, card)
	res = apply(t, hostOf(k2), cfg, "bad", Options{}, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "failed: config: ")
	assert.Contains(t, res.Refused[0].Reason, "cannot host X1-4Q; it can host X1-8Q, X1-16Q")
}

// customHost builds a one-GPU host with the given vGPU card.
func customHost(t *testing.T, device uint16, card hostsim.VGPUCard) *hostsim.Kernel {
	t.Helper()
	k, err := hostsim.New(t.TempDir(), true)
	require.NoError(t, err)
	require.NoError(t, k.AddDriver(hostsim.Driver{Name: "nvidia", Module: "nvidia", Loaded: true, Aliases: []string{"pci:v000010DEd*sv*sd*bc03sc*i*"}}))
	f := hostsim.Func{Address: card.PF, Vendor: 0x10de, Device: device, SubVendor: 0x10de, SubDevice: 0x1234, Class: 0x030200,
		Driver: "nvidia", Group: 10, NvidiaMinor: 0, TotalVFs: card.TotalVFs}
	require.NoError(t, k.AddFunction(f))
	require.NoError(t, k.EnableVGPU(card))
	require.NoError(t, os.MkdirAll(filepath.Join(k.Root(), "proc"), 0o755))
	return k
}

// FuzzParseConfig: any input parses or fails with a ConfigError, never a
// panic; what parses holds only valid names, counts and indexes.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(testConfig))
	f.Add(DefaultConfigYAML()[:2000])
	f.Add([]byte("version: v1\nvgpu-configs: {a: [{devices: [0, 1], device-filter: [\"0x223610DE\"], vgpu-devices: {A10-4Q: 2}}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("fuzz.yaml", data)
		if err != nil {
			if !IsConfigError(err) {
				t.Fatalf("not a ConfigError: %T %v", err, err)
			}
			return
		}
		if c.Version != ConfigVersion || len(c.Configs) == 0 {
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
