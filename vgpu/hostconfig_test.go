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
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

// TestSelectUnknownConfigPlansNothing: a config name the file lacks is a
// config error (exit 1) before anything is planned.
func TestSelectUnknownConfigPlansNothing(t *testing.T) {
	_, h := fixture(t, "a10-vgpu")
	_, err := PlanConfig(context.Background(), h, parse(t, testConfig), "large", Options{})
	assert.True(t, vgpuconfig.IsError(err))
	assert.Equal(t, ExitBadInput, ExitCode(err, nil))
}

// TestHostValidation: a type a GPU cannot host, too many instances, mixed
// sizes over the framebuffer, a MIG-backed type, a GPU without the vGPU
// host driver: exit-1 errors naming the
// config, the key and the GPU, and nothing is changed.
func TestHostValidation(t *testing.T) {
	for _, c := range []struct {
		fixture, vgpus, key, msg string
	}{
		{"t4-vgpu", "{A100-10C: 1}", "vgpu-configs.bad[0].vgpu-devices.A100-10C", "this GPU cannot host A100-10C; it can host T4-1A, T4-2A"},
		{"t4-vgpu", "{T4-4Q: 5}", "vgpu-configs.bad[0].vgpu-devices.T4-4Q", "asks for 5 vGPUs of size 4 GB; this GPU holds at most 4 (from mdev description)"},
		{"a10-vgpu", "{A10-4Q: 7}", "vgpu-configs.bad[0].vgpu-devices.A10-4Q", "asks for 7 vGPUs of size 4 GB; this GPU holds at most 6 (from catalog)"},
		{"a10-vgpu", "{A10-12Q: 1, A10-8Q: 2}", "vgpu-configs.bad[0].vgpu-devices", "asks for 28 GB of vGPUs (A10-12Q (12 GB) x1, A10-8Q (8 GB) x2); this GPU has 24 GB"},
		{"a100-sriov-vgpu", "{A100-1-5C: 2}", "vgpu-configs.bad[0].vgpu-devices.A100-1-5C", "A100-1-5C is a MIG-backed vGPU type: it needs the GPU in MIG mode (nvidia-smi -i 0000:41:00.0 -mig 1) with a GPU instance of 1 slices"},
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
			var ce *vgpuconfig.Error
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
	def, err := vgpuconfig.Default()
	require.NoError(t, err)
	res := Apply(t.Context(), h, planOf(t, h, def, vgpuconfig.DefaultName, Options{}), ApplyOptions{})
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

// TestDefaultConfigOnEveryFixture: the built-in default applies on every
// simulated vGPU host: two vGPUs of half the framebuffer per GPU.
func TestDefaultConfigOnEveryFixture(t *testing.T) {
	def, err := vgpuconfig.Default()
	require.NoError(t, err)
	for fx, want := range map[string]map[string]int{
		"a10-vgpu": {"A10-12Q": 2}, "a100-sriov-vgpu": {"A100-20C": 2}, "l40s-vgpu": {"L40S-24Q": 2}, "t4x8-vgpu": {"T4-8Q": 2},
	} {
		_, h := fixture(t, fx)
		res := apply(t, h, def, vgpuconfig.DefaultName, Options{}, ApplyOptions{})
		require.True(t, res.OK(), "%s: %v", fx, res.Refused)
		for addr, c := range countsOf(t, h) {
			assert.Equal(t, want, c, "%s %s", fx, addr)
		}
	}
	// A GPU the default does not know is left alone.
	k, h := fixture(t, "workstation")
	res := apply(t, h, def, vgpuconfig.DefaultName, Options{}, ApplyOptions{})
	assert.True(t, res.OK(), "%v", res.Refused)
	assert.False(t, res.GPUs[0].Managed)
	assert.Empty(t, k.Writes())
	// A known GPU without the vGPU host driver is a config error (exit 1).
	k, h = fixture(t, "hgx-h100")
	_, err = PlanConfig(t.Context(), h, def, vgpuconfig.DefaultName, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is NVIDIA's vGPU host driver loaded?")
	assert.Empty(t, k.Writes())
}
