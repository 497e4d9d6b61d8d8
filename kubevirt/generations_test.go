package kubevirt

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// generationTypes: per vGPU fixture, the built-in default's type (two per
// GPU: on vendor-VFIO cards that fills the card, so the driver lists no
// type any more) and another type of the same GPU, one per GPU for a
// relabel (the card keeps free VFs: the driver's lists name it).
var generationTypes = map[string][2]string{
	"t4-vgpu": {"T4-8Q", "T4-4Q"}, "t4x8-vgpu": {"T4-8Q", "T4-2Q"},
	"a10-vgpu": {"A10-12Q", "A10-4Q"}, "a16-vgpu": {"A16-8Q", "A16-4C"}, "a40-vgpu": {"A40-24Q", "A40-8Q"},
	"a100-sriov-vgpu": {"A100-20C", "A100-10C"},
	"l4-vgpu":         {"L4-12Q", "L4-6Q"}, "l40-vgpu": {"L40-24Q", "L40-12Q"}, "l40s-vgpu": {"L40S-24Q", "L40S-16Q"},
	"h100-vgpu": {"H100-40C", "H100-20C"}, "h100-sxm-vgpu": {"H100XM-40C", "H100XM-10C"}, "h200-vgpu": {"H200X-70C", "H200X-35C"},
	"rtxpro6000-vgpu": {"DC-48Q", "DC-24Q"}, "b200-vgpu": {"B200X-90C", "B200X-45C"},
}

// TestEveryGenerationAdvertisedByName: on every vGPU fixture the vGPU
// manager applies the built-in default and writes its ready report as Run
// does; the plugin advertises nvidia.com/NVIDIA_<type> for every vGPU,
// never a resource named after a type id; a relabel to another type
// changes the set.
func TestEveryGenerationAdvertisedByName(t *testing.T) {
	def, err := vgpuconfig.Default()
	require.NoError(t, err)
	namer, err := NewNamer("", "")
	require.NoError(t, err)
	fxs := hostsim.VGPUFixtures()
	require.Len(t, fxs, len(generationTypes), "a row for every vGPU fixture")
	for _, fx := range fxs {
		types, ok := generationTypes[fx.Name]
		require.True(t, ok, "no row for %s", fx.Name)
		t.Run(fx.Name, func(t *testing.T) {
			t.Parallel() // each on its own host; mostly waiting on the file system
			k, err := fx.Build(t.TempDir())
			require.NoError(t, err)
			h := host.New(k.Options())
			run := t.TempDir()
			mem, err := vgpu.LoadTypeMemory(filepath.Join(run, names.VGPUTypesFile), nil)
			require.NoError(t, err)
			ready := filepath.Join(run, names.VGPUReadyFile)
			s := &Scanner{Host: h, Namer: namer, VGPU: VGPUState{ReadyFile: ready}, Log: logr.Discard()}
			applyAndReport := func(cfg *vgpuconfig.Config, config string) map[string]int {
				t.Helper()
				plan, err := vgpu.PlanConfig(context.Background(), h, cfg, config, vgpu.Options{NodeName: "n", TypeNames: mem})
				require.NoError(t, err)
				res := vgpu.Apply(context.Background(), h, plan, vgpu.ApplyOptions{})
				require.True(t, res.OK(), "%s: %v", config, res.Refused)
				var gpus []*vgpu.GPU
				for _, g := range res.GPUs {
					gpus = append(gpus, g.GPU)
				}
				require.NoError(t, wire.WriteVGPUReady(ready, wire.VGPUReady{Config: config, State: wire.VGPUStateSuccess, GPUs: vgpu.ReadyGPUs(gpus)}))
				got := resourcesOf(t, s)
				for name := range got {
					assert.NotContains(t, name, "vGPU_type", "a resource named after a type id")
				}
				return got
			}
			n := len(fx.VGPUs)
			assert.Equal(t, map[string]int{"nvidia.com/NVIDIA_" + types[0]: 2 * n}, applyAndReport(def, vgpuconfig.DefaultName))

			one, err := vgpuconfig.Parse("relabel.yaml", []byte(fmt.Sprintf("version: v1\nvgpu-configs:\n  one:\n    - devices: all\n      vgpu-devices: {%q: 1}\n", types[1])))
			require.NoError(t, err)
			got := applyAndReport(one, "one")
			assert.Equal(t, map[string]int{"nvidia.com/NVIDIA_" + types[1]: n}, got, "the relabel changes the set")
			for name := range got {
				assert.False(t, strings.Contains(name, " "), "%q", name)
			}
		})
	}
}
