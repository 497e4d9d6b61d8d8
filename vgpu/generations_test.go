package vgpu

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

// generation is what the built-in config gives a vGPU fixture's GPUs: the
// default's type (two per GPU), and a relabel to the config named after
// another type of the same GPU, which fills it.
type generation struct {
	def, relabel string
	n            int // vGPUs per GPU after the relabel
}

// generations: every fixture of hostsim.VGPUFixtures, one per GPU
// generation as NVIDIA's vGPU host driver shows it.
var generations = map[string]generation{
	"t4-vgpu":         {"T4-8Q", "T4-4Q", 4},
	"a10-vgpu":        {"A10-12Q", "A10-4Q", 6},
	"t4x8-vgpu":       {"T4-8Q", "T4-2Q", 8},
	"a16-vgpu":        {"A16-8Q", "A16-4C", 4},
	"a40-vgpu":        {"A40-24Q", "A40-8Q", 6},
	"a100-sriov-vgpu": {"A100-20C", "A100-10C", 4},
	"l4-vgpu":         {"L4-12Q", "L4-6Q", 4},
	"l40-vgpu":        {"L40-24Q", "L40-12Q", 4},
	"l40s-vgpu":       {"L40S-24Q", "L40S-16Q", 3},
	"h100-vgpu":       {"H100-40C", "H100-20C", 4},
	"h100-sxm-vgpu":   {"H100XM-40C", "H100XM-10C", 8},
	"h200-vgpu":       {"H200X-70C", "H200X-35C", 4},
	"rtxpro6000-vgpu": {"DC-48Q", "DC-24Q", 4},
	"b200-vgpu":       {"B200X-90C", "B200X-45C", 4},
}

// TestEveryGenerationAsTheDriverShowsIt: on every vGPU fixture the
// built-in default applies (two vGPUs of half the framebuffer per GPU); a
// second pass of the same manager and a manager started afresh over the
// same run folder plan nothing and write nothing (on vendor-VFIO cards
// the default fills the card: the driver lists no type any more, so the
// names come from what the manager remembered); a relabel to another type
// of the same GPU changes the set, and is then as steady.
func TestEveryGenerationAsTheDriverShowsIt(t *testing.T) {
	def, err := vgpuconfig.Default()
	require.NoError(t, err)
	fxs := hostsim.VGPUFixtures()
	require.Len(t, fxs, len(generations), "a row for every vGPU fixture")
	for _, fx := range fxs {
		g, ok := generations[fx.Name]
		require.True(t, ok, "no row for %s", fx.Name)
		t.Run(fx.Name, func(t *testing.T) {
			t.Parallel() // each on its own host; mostly waiting on the file system
			k, err := fx.Build(t.TempDir())
			require.NoError(t, err)
			h := host.New(k.Options())
			file := filepath.Join(t.TempDir(), names.VGPUTypesFile)
			manager := func() *TypeMemory { // a new process over the same run folder
				m, err := LoadTypeMemory(file, nil)
				require.NoError(t, err)
				return m
			}
			mem := manager()
			steady := func(config string, want map[string]int) {
				t.Helper()
				res := Apply(t.Context(), h, planOf(t, h, def, config, Options{TypeNames: mem}), ApplyOptions{})
				require.True(t, res.OK(), "%s: %v", config, res.Refused)
				gpus, err := Inventory(h, mem)
				require.NoError(t, err)
				require.Len(t, gpus, len(fx.VGPUs))
				for _, gpu := range gpus {
					assert.Equal(t, want, gpu.counts(), "%s on %s", config, gpu.Address)
				}
				for name, namer := range map[string]*TypeMemory{"second pass": mem, "restarted manager": manager()} {
					k.ResetWrites()
					p := planOf(t, h, def, config, Options{TypeNames: namer})
					assert.Empty(t, p.Refusals(), "%s, %s", config, name)
					assert.False(t, p.Changes(), "%s, %s: %v", config, name, PlanReport(p).Actions)
					again := Apply(t.Context(), h, p, ApplyOptions{})
					assert.True(t, again.OK(), "%s, %s: %v", config, name, again.Refused)
					assert.Empty(t, k.Writes(), "%s, %s", config, name)
				}
			}
			steady(vgpuconfig.DefaultName, map[string]int{g.def: 2})
			steady(g.relabel, map[string]int{g.relabel: g.n})
		})
	}
}
