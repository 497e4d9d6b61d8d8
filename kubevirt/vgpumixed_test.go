package kubevirt

import (
	"path/filepath"
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

// TestMixedSizesAdvertisedAsTwoResources: once the vGPU manager applies a
// config mixing sizes on GPUs in mixed-size mode (the seeds' A10-4Q: 3
// with A10-6Q: 2 on an A10 with mdev; two sizes on each vendor-VFIO L40S,
// named from the manager's ready file), the plugin advertises one resource
// per type with the vGPUs of that type.
func TestMixedSizesAdvertisedAsTwoResources(t *testing.T) {
	for _, c := range []struct {
		fixture, vgpus string
		want           map[string]int
	}{
		{"a10-vgpu", `{"A10-4Q": 3, "A10-6Q": 2}`, map[string]int{"nvidia.com/NVIDIA_A10-4Q": 3, "nvidia.com/NVIDIA_A10-6Q": 2}},
		{"l40s-vgpu", `{"L40S-24Q": 1, "L40S-8Q": 3}`, map[string]int{"nvidia.com/NVIDIA_L40S-24Q": 2, "nvidia.com/NVIDIA_L40S-8Q": 6}},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			fx, err := hostsim.Lookup(c.fixture)
			require.NoError(t, err)
			for i := range fx.VGPUs {
				fx.VGPUs[i].MixedSize = true
			}
			k, err := fx.Build(t.TempDir())
			require.NoError(t, err)
			h := host.New(k.Options())
			cfg, err := vgpuconfig.Parse("mixed.yaml", []byte("version: v1\nvgpu-configs:\n  mixed:\n  - devices: all\n    vgpu-devices: "+c.vgpus+"\n"))
			require.NoError(t, err)
			run := t.TempDir()
			mem, err := vgpu.LoadTypeMemory(filepath.Join(run, names.VGPUTypesFile), nil)
			require.NoError(t, err)
			plan, err := vgpu.PlanConfig(t.Context(), h, cfg, "mixed", vgpu.Options{NodeName: "n", TypeNames: mem, SizeModes: &vgpu.SizeModes{}})
			require.NoError(t, err)
			res := vgpu.Apply(t.Context(), h, plan, vgpu.ApplyOptions{})
			require.True(t, res.OK(), "%v", res.Refused)
			var gpus []*vgpu.GPU
			for _, g := range res.GPUs {
				gpus = append(gpus, g.GPU)
			}
			ready := filepath.Join(run, names.VGPUReadyFile)
			require.NoError(t, wire.WriteVGPUReady(ready, wire.VGPUReady{Config: "mixed", State: wire.VGPUStateSuccess, GPUs: vgpu.ReadyGPUs(gpus)}))
			namer, err := NewNamer("", "")
			require.NoError(t, err)
			s := &Scanner{Host: h, Namer: namer, VGPU: VGPUState{ReadyFile: ready, PauseFile: filepath.Join(run, names.VGPUPauseFile)}, Log: logr.Discard()}
			assert.Equal(t, c.want, resourcesOf(t, s))
		})
	}
}
