package vgpu

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// seedsConfig is the seeds' own example (section 10.8): two sizes on one
// A10.
const seedsConfig = `version: v1
vgpu-configs:
  custom-A10-config:
  - devices: all
    vgpu-devices:
      "A10-4Q": 3
      "A10-6Q": 2
  unplaceable:
  - devices: all
    vgpu-devices: {"A10-8Q": 1, "A10-6Q": 1, "A10-3Q": 2, "A10-2Q": 2}
  one-size:
  - devices: all
    vgpu-devices: {"A10-4Q": 2}
  full:
  - devices: all
    vgpu-devices: {"A10-4Q": 6}
`

// a10Layouts are the A10 vGPU layouts the tests run on: the a10-vgpu
// fixture as it is, and the same GPU with SR-IOV, mdev types on its 16 VFs
// (as a real A10 shows them).
var a10Layouts = []string{"fixture", "mdev on VFs"}

// a10Host builds the a10-vgpu fixture in a layout with its GPU in
// mixed-size mode or not.
func a10Host(t *testing.T, layout string, mixed bool) (*hostsim.Kernel, *host.Host, host.Address) {
	t.Helper()
	fx, err := hostsim.Lookup("a10-vgpu")
	require.NoError(t, err)
	require.Len(t, fx.VGPUs, 1)
	card := &fx.VGPUs[0]
	card.MixedSize = mixed
	if layout == "mdev on VFs" && card.Mode != hostsim.MdevVF {
		card.Mode, card.TotalVFs, card.VFGroupBase = hostsim.MdevVF, 16, 100
		for i := range fx.Funcs {
			if fx.Funcs[i].Address == card.PF {
				fx.Funcs[i].TotalVFs = 16
			}
		}
	}
	k, err := fx.Build(t.TempDir())
	require.NoError(t, err)
	a, err := host.ParseAddress(card.PF)
	require.NoError(t, err)
	return k, hostOf(k), a
}

// vfCount is the GPU's sriov_numvfs.
func vfCount(t *testing.T, h *host.Host, gpu host.Address) int {
	t.Helper()
	f, err := h.ReadFunction(gpu)
	require.NoError(t, err)
	return f.SRIOVNumVFs
}

// creates lists the types of the create steps done, in order.
func creates(done []Step) []string {
	var out []string
	for _, s := range done {
		if s.Op == OpCreate {
			out = append(out, s.Type)
		}
	}
	return out
}

// TestSeedsMixedConfigAppliesInMixedSizeMode: on an A10 in mixed-size mode
// the seeds' A10-4Q: 3 with A10-6Q: 2 applies, the larger size created
// first; a second pass and a manager started afresh write nothing.
func TestSeedsMixedConfigAppliesInMixedSizeMode(t *testing.T) {
	for _, layout := range a10Layouts {
		t.Run(layout, func(t *testing.T) {
			k, h, gpu := a10Host(t, layout, true)
			cfg := parse(t, seedsConfig)
			modes := &SizeModes{}
			res := apply(t, h, cfg, "custom-A10-config", Options{SizeModes: modes}, ApplyOptions{})
			require.True(t, res.OK(), "%v", res.Refused)
			assert.Equal(t, map[string]int{"A10-4Q": 3, "A10-6Q": 2}, countsOf(t, h)[gpu])
			assert.Equal(t, []string{"A10-6Q", "A10-6Q", "A10-4Q", "A10-4Q", "A10-4Q"}, creates(res.GPUs[0].Done), "largest first")
			assert.Empty(t, k.Violations())

			for name, m := range map[string]*SizeModes{"second pass": modes, "restarted manager": {}} {
				k.ResetWrites()
				p := planOf(t, h, cfg, "custom-A10-config", Options{SizeModes: m})
				assert.False(t, p.Changes(), "%s: %v", name, PlanReport(p).Actions)
				again := Apply(t.Context(), h, p, ApplyOptions{})
				assert.True(t, again.OK(), "%s: %v", name, again.Refused)
				assert.Empty(t, k.Writes(), name)
			}
		})
	}
}

// TestMixedConfigRefusedInEqualSizeMode: the same config on an A10 in
// equal-size mode (NVIDIA's default) is refused (exit 2) naming the GPU,
// the reason and configs that work; the one vGPU the pass created to learn
// the mode is removed, and VFs it enabled are disabled again, so nothing
// is left behind. The manager remembers: its next pass refuses without a
// write. A GPU already holding one size shows its mode without any write.
func TestMixedConfigRefusedInEqualSizeMode(t *testing.T) {
	for _, layout := range a10Layouts {
		t.Run(layout, func(t *testing.T) {
			k, h, gpu := a10Host(t, layout, false)
			cfg := parse(t, seedsConfig)
			vfsBefore := vfCount(t, h, gpu)
			modes := &SizeModes{}
			res := apply(t, h, cfg, "custom-A10-config", Options{SizeModes: modes}, ApplyOptions{})
			require.False(t, res.OK())
			assert.Equal(t, ExitRefused, ExitCode(res.Err(), nil))
			require.Len(t, res.Refused, 1)
			why := res.Refused[0].Reason
			for _, want := range []string{string(gpu), "NVIDIA A10", "equal-size vGPU mode", "A10-6Q (6 GB) x2, A10-4Q (4 GB) x3",
				`"A10-4Q: 6"`, "nvidia-smi vgpu -i " + string(gpu) + " -shm 1", "left as it was"} {
				assert.Contains(t, why, want)
			}
			assert.Empty(t, countsOf(t, h)[gpu], "nothing left behind")
			assert.Equal(t, vfsBefore, vfCount(t, h, gpu), "VFs as they were")
			assert.Equal(t, []string{"A10-6Q"}, creates(res.GPUs[0].Done), "one vGPU of the largest size tells the mode")
			assert.Empty(t, k.Violations())

			k.ResetWrites()
			p := planOf(t, h, cfg, "custom-A10-config", Options{SizeModes: modes})
			assert.False(t, p.Changes(), "remembered: no probe again")
			require.Len(t, p.Refusals(), 1)
			assert.Contains(t, p.Refusals()[0].Reason, "equal-size vGPU mode")
			Apply(t.Context(), h, p, ApplyOptions{})
			assert.Empty(t, k.Writes())

			require.True(t, apply(t, h, cfg, "one-size", Options{}, ApplyOptions{}).OK())
			k.ResetWrites()
			p = planOf(t, h, cfg, "custom-A10-config", Options{SizeModes: &SizeModes{}})
			require.Len(t, p.Refusals(), 1, "a fresh manager reads the mode from the A10-4Q vGPUs it holds")
			assert.Contains(t, p.Refusals()[0].Reason, "equal-size vGPU mode")
			Apply(t.Context(), h, p, ApplyOptions{})
			assert.Empty(t, k.Writes())
			assert.Equal(t, map[string]int{"A10-4Q": 2}, countsOf(t, h)[gpu])
		})
	}
}

// TestMixedSizesThatDoNotPlaceAreRefused: in mixed-size mode, sizes that
// fit the framebuffer but not its placements (8+6+3+3+2+2 GB on 24 GB:
// the last A10-2Q finds 2 GB free, never aligned) are refused naming the
// type, and what the pass created is removed again.
func TestMixedSizesThatDoNotPlaceAreRefused(t *testing.T) {
	for _, layout := range a10Layouts {
		t.Run(layout, func(t *testing.T) {
			k, h, gpu := a10Host(t, layout, true)
			vfsBefore := vfCount(t, h, gpu)
			res := apply(t, h, parse(t, seedsConfig), "unplaceable", Options{}, ApplyOptions{})
			require.False(t, res.OK())
			require.Len(t, res.Refused, 1)
			why := res.Refused[0].Reason
			assert.Contains(t, why, "mixed-size vGPU mode has no free placement for A10-2Q")
			assert.Contains(t, why, string(gpu))
			assert.True(t, strings.HasPrefix(why, "failed: "), why)
			assert.Equal(t, []string{"A10-8Q", "A10-6Q", "A10-3Q", "A10-3Q", "A10-2Q"}, creates(res.GPUs[0].Done))
			assert.Empty(t, countsOf(t, h)[gpu], "nothing left behind")
			assert.Equal(t, vfsBefore, vfCount(t, h, gpu))
			assert.Empty(t, k.Violations())
		})
	}
}

// TestRefusedMixedChangePutsBackWhatItRemoved: on a full equal-size A10
// (six A10-4Q: nothing tells the mode) the seeds' config keeps three,
// removes three and finds, before its first create, that A10-6Q cannot
// join them; the three removed are created again, same UUIDs or VFs, and
// the GPU holds what it held.
func TestRefusedMixedChangePutsBackWhatItRemoved(t *testing.T) {
	for _, layout := range a10Layouts {
		t.Run(layout, func(t *testing.T) {
			k, h, gpu := a10Host(t, layout, false)
			cfg := parse(t, seedsConfig)
			require.True(t, apply(t, h, cfg, "full", Options{}, ApplyOptions{}).OK())
			before := state(t, h)
			res := apply(t, h, cfg, "custom-A10-config", Options{SizeModes: &SizeModes{}}, ApplyOptions{})
			require.False(t, res.OK())
			require.Len(t, res.Refused, 1)
			assert.Contains(t, res.Refused[0].Reason, "equal-size vGPU mode")
			var ops []Op
			for _, s := range res.GPUs[0].Done {
				ops = append(ops, s.Op)
			}
			assert.Equal(t, []Op{OpRemove, OpRemove, OpRemove, OpCreate, OpCreate, OpCreate}, ops, "three removed, none of the other size created, three put back")
			assert.Equal(t, before, state(t, h))
			assert.Equal(t, map[string]int{"A10-4Q": 6}, countsOf(t, h)[gpu])
			assert.Empty(t, k.Violations())
		})
	}
}

// TestMixedSizesOnVendorVFIO: on vendor-specific VFIO cards (two L40S) the
// same rules hold through creatable_vgpu_types and current_vgpu_type: in
// mixed-size mode two sizes apply on each GPU; in equal-size mode each GPU
// is refused after one vGPU and left with its VFs disabled, as it was.
func TestMixedSizesOnVendorVFIO(t *testing.T) {
	cfg := parse(t, "version: v1\nvgpu-configs:\n  two:\n  - devices: all\n    vgpu-devices: {\"L40S-24Q\": 1, \"L40S-8Q\": 3}\n")
	for _, mixed := range []bool{true, false} {
		fx, err := hostsim.Lookup("l40s-vgpu")
		require.NoError(t, err)
		for i := range fx.VGPUs {
			fx.VGPUs[i].MixedSize = mixed
		}
		k, err := fx.Build(t.TempDir())
		require.NoError(t, err)
		h := hostOf(k)
		res := apply(t, h, cfg, "two", Options{SizeModes: &SizeModes{}}, ApplyOptions{})
		for _, c := range fx.VGPUs {
			a := host.Address(c.PF)
			if mixed {
				assert.Equal(t, map[string]int{"L40S-24Q": 1, "L40S-8Q": 3}, countsOf(t, h)[a])
				continue
			}
			assert.Empty(t, countsOf(t, h)[a])
			assert.Zero(t, vfCount(t, h, a))
		}
		if mixed {
			require.True(t, res.OK(), "%v", res.Refused)
			continue
		}
		require.Len(t, res.Refused, 2)
		for _, r := range res.Refused {
			assert.Contains(t, r.Reason, "equal-size vGPU mode")
			assert.Contains(t, r.Reason, `"L40S-8Q: 6"`)
		}
		assert.Empty(t, k.Violations())
	}
}

// TestRunRemembersAnEqualSizeGPU: the node's manager refuses the seeds'
// config on an equal-size A10 once (a Warning event names the reason), and
// its retries, every 100ms, write nothing: it remembers the GPU's mode.
func TestRunRemembersAnEqualSizeGPU(t *testing.T) {
	f := startRun(t, "vgpu-equal-size", "a10-vgpu", map[string]string{names.VGPUConfigLabel: "custom-A10-config"}, time.Hour,
		func(f *runFixture) {
			f.retry = 100 * time.Millisecond
			f.writeConfig(t, seedsConfig)
		})
	r := f.waitState(t, "custom-A10-config", StateFailed)
	require.Len(t, r.Refused, 1)
	assert.Contains(t, r.Refused[0].Reason, "equal-size vGPU mode")
	f.waitEvent(t, EventRefused, "equal-size vGPU mode")
	f.k.ResetWrites()
	_, n := f.last()
	testutil.Eventually(t, waitFor, "three more passes", func() bool {
		_, m := f.last()
		return m >= n+3
	})
	assert.Empty(t, f.k.Writes(), "no probe again")
	assert.Empty(t, r.GPUs[0].VGPUs)
}

// TestModeNotShownIsRefusedNamingBothReasons: on a GPU whose types have no
// smaller size dividing the one held (5 and 4 GB), the lists cannot tell
// equal-size mode from a full placement; in equal-size mode the second
// size is refused naming both possible reasons and the two vGPUs created
// go again; in mixed-size mode the same config applies.
func TestModeNotShownIsRefusedNamingBothReasons(t *testing.T) {
	cfg := parse(t, "version: v1\nvgpu-configs:\n  two:\n  - devices: all\n    vgpu-devices: {\"X1-5Q\": 2, \"X1-4Q\": 2}\n")
	for _, mixed := range []bool{false, true} {
		k := customHost(t, 0x1234, hostsim.VGPUCard{PF: "0000:3b:00.0", Mode: hostsim.MdevPF, FramebufferGB: 20, MixedSize: mixed,
			Types: []hostsim.VGPUType{{ID: 900, Name: "NVIDIA X1-5Q", SizeGB: 5}, {ID: 901, Name: "NVIDIA X1-4Q", SizeGB: 4}}})
		h := hostOf(k)
		res := apply(t, h, cfg, "two", Options{SizeModes: &SizeModes{}}, ApplyOptions{})
		if mixed {
			require.True(t, res.OK(), "%v", res.Refused)
			assert.Equal(t, map[string]int{"X1-5Q": 2, "X1-4Q": 2}, countsOf(t, h)["0000:3b:00.0"])
			continue
		}
		require.Len(t, res.Refused, 1)
		assert.Contains(t, res.Refused[0].Reason, "does not offer X1-4Q next to the vGPUs of another size it holds: either it is in equal-size vGPU mode")
		assert.Contains(t, res.Refused[0].Reason, "NVIDIA X1")
		assert.Equal(t, []string{"X1-5Q", "X1-5Q"}, creates(res.GPUs[0].Done))
		assert.Empty(t, countsOf(t, h)["0000:3b:00.0"])
	}
}
