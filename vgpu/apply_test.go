package vgpu

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// TestApplyEveryBackend applies each config on each vGPU fixture: the
// result is what the config asks, a second run writes nothing, and each
// write is one the backend's protocol has.
func TestApplyEveryBackend(t *testing.T) {
	cfg := parse(t, testConfig)
	want := map[string]map[string]map[string]int{
		"a10-vgpu":        {"default": {"A10-12Q": 2}, "small": {"A10-4Q": 6}, "none": {}},
		"a100-sriov-vgpu": {"default": {"A100-10C": 4}, "small": {"A100-4C": 10}, "none": {}},
		"l40s-vgpu":       {"default": {"L40S-24Q": 2}, "small": {"L40S-8Q": 4, "L40S-8A": 2}, "none": {}},
		"t4-vgpu":         {"default": {"T4-8Q": 2}, "small": {"T4-4Q": 4}, "none": {}},
	}
	protocol := map[string][]string{
		"t4-vgpu":         {"/create", "/remove"},
		"a10-vgpu":        {"/sriov_numvfs", "/create", "/remove"},
		"a100-sriov-vgpu": {"/sriov_numvfs", "/create", "/remove"},
		"l40s-vgpu":       {"/sriov_numvfs", "/current_vgpu_type"},
	}
	for fx, byConfig := range want {
		t.Run(fx, func(t *testing.T) {
			k, h := fixture(t, fx)
			// Every transition between the configs, in both directions.
			for _, sel := range []string{"default", "small", "default", "none", "small", "none"} {
				k.ResetWrites()
				res := apply(t, h, cfg, sel, Options{}, ApplyOptions{})
				require.True(t, res.OK(), "%s: %v", sel, res.Refused)
				for _, g := range res.GPUs {
					assert.Equal(t, byConfig[sel], nonZero(g.Have), "%s on %s", sel, g.GPU.Describe())
				}
				for _, w := range k.Writes() {
					ok := false
					for _, suffix := range protocol[fx] {
						ok = ok || strings.HasSuffix(w.Path, suffix)
					}
					assert.True(t, ok, "%s: unexpected write %s", sel, w.Path)
				}
				k.ResetWrites()
				again := planOf(t, h, cfg, sel, Options{})
				assert.False(t, again.Changes(), "%s: a second plan has nothing to do: %v", sel, PlanReport(again).Actions)
				Apply(t.Context(), h, again, ApplyOptions{})
				assert.Empty(t, k.Writes(), "%s: a second apply writes nothing", sel)
			}
			assert.Empty(t, k.Violations())
		})
	}
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// TestMatchingVGPUsAreKept: vGPUs of a wanted type stay, whatever their
// UUID; only the surplus goes, and only what is missing is made.
func TestMatchingVGPUsAreKept(t *testing.T) {
	k, h := fixture(t, "t4-vgpu")
	const foreign = "0c0ffee0-0000-4000-8000-000000000001"
	require.NoError(t, h.CreateMdev("0000:3b:00.0", "nvidia-232", foreign)) // T4-4Q, made by someone else
	k.ResetWrites()
	res := apply(t, h, parse(t, testConfig), "small", Options{}, ApplyOptions{})
	require.True(t, res.OK(), "%v", res.Refused)
	ids := state(t, h)["0000:3b:00.0"]
	assert.Len(t, ids, 4)
	assert.Contains(t, ids, "T4-4Q@"+foreign, "kept whatever its UUID")
	assert.Len(t, k.Writes(), 3, "three creates, no remove")
	for i := 0; i < 3; i++ {
		assert.Contains(t, ids, "T4-4Q@"+StableUUID(testNode, "0000:3b:00.0", i), "slot %d", i)
	}

	fewer := parse(t, `version: v1
vgpu-configs:
  two:
    - devices: [0]
      vgpu-devices: {"T4-4Q": 2}
`)
	k.ResetWrites()
	res = apply(t, h, fewer, "two", Options{}, ApplyOptions{})
	require.True(t, res.OK(), "%v", res.Refused)
	ids = state(t, h)["0000:3b:00.0"]
	assert.ElementsMatch(t, []string{"T4-4Q@" + StableUUID(testNode, "0000:3b:00.0", 0), "T4-4Q@" + StableUUID(testNode, "0000:3b:00.0", 1)}, ids,
		"the stable slots stay, the foreign one goes first")
	assert.Len(t, k.Writes(), 2, "two removes, nothing created")
}

// TestStableUUIDsAfterReboot: the same node, GPU and slot give the same
// UUIDs on a fresh host (a reboot: nothing persists); another node gets
// others.
func TestStableUUIDsAfterReboot(t *testing.T) {
	cfg := parse(t, testConfig)
	_, h1 := fixture(t, "t4-vgpu")
	apply(t, h1, cfg, "small", Options{}, ApplyOptions{})
	_, h2 := fixture(t, "t4-vgpu")
	apply(t, h2, cfg, "small", Options{}, ApplyOptions{})
	assert.Equal(t, state(t, h1), state(t, h2))
	_, h3 := fixture(t, "t4-vgpu")
	apply(t, h3, cfg, "small", Options{NodeName: "node-b"}, ApplyOptions{})
	assert.NotEqual(t, state(t, h1), state(t, h3))
	assert.Equal(t, StableUUID("n", "0000:3b:00.0", 3), StableUUID("n", "0000:3b:00.0", 3))
	assert.NotEqual(t, StableUUID("n", "0000:3b:00.0", 3), StableUUID("n", "0000:3b:00.0", 4))
	assert.NotEqual(t, StableUUID("n", "0000:3b:00.0", 3), StableUUID("n", "0000:af:00.0", 3))
}

// TestUnmanagedGPUsUntouched: GPUs no entry selects keep their vGPUs.
func TestUnmanagedGPUsUntouched(t *testing.T) {
	k, h := fixture(t, "t4x8-vgpu")
	cfg := parse(t, `version: v1
vgpu-configs:
  all:
    - devices: all
      vgpu-devices: {"T4-4Q": 4}
  first:
    - devices: [0, 9]
      vgpu-devices: {"T4-8Q": 2}
`)
	require.True(t, apply(t, h, cfg, "all", Options{}, ApplyOptions{}).OK())
	before := state(t, h)
	k.ResetWrites()
	res := apply(t, h, cfg, "first", Options{}, ApplyOptions{})
	require.True(t, res.OK(), "%v", res.Refused)
	after := state(t, h)
	for _, w := range k.Writes() {
		assert.Equal(t, host.Address("0000:18:00.0"), w.Address, "only GPU 0 is written: %s", w.Path)
	}
	assert.NotEqual(t, before["0000:18:00.0"], after["0000:18:00.0"])
	delete(before, "0000:18:00.0")
	delete(after, "0000:18:00.0")
	assert.Equal(t, before, after)
	assert.False(t, res.GPUs[1].Managed)
}

// TestPauseFileWhileChanging: the pause file exists during every write and
// is gone afterwards, also when the apply fails; nothing to do creates none.
func TestPauseFileWhileChanging(t *testing.T) {
	cfg := parse(t, testConfig)
	k, h := fixture(t, "a10-vgpu")
	pause := filepath.Join(t.TempDir(), "run", "vgpu-device-manager.pause")
	require.NoError(t, os.MkdirAll(filepath.Dir(pause), 0o755))
	seen := 0
	k.SetLatency(func(hostsim.Write) time.Duration {
		if _, err := os.Stat(pause); err == nil {
			seen++
		}
		return 0
	})
	res := apply(t, h, cfg, "small", Options{}, ApplyOptions{PauseFile: pause})
	require.True(t, res.OK(), "%v", res.Refused)
	assert.Equal(t, 7, seen, "paused during the VF enable and each of the six creates")
	assert.NoFileExists(t, pause)

	k.CrashAfter(2)
	res = apply(t, h, cfg, "default", Options{}, ApplyOptions{PauseFile: pause})
	require.False(t, res.OK())
	assert.Contains(t, res.Refused[0].Reason, "simulated crash")
	assert.NoFileExists(t, pause, "removed on the error path too")
	k.CrashAfter(0)

	seen = 0
	require.True(t, apply(t, h, cfg, "default", Options{}, ApplyOptions{PauseFile: pause}).OK())
	seen = 0
	require.True(t, apply(t, h, cfg, "default", Options{}, ApplyOptions{PauseFile: pause}).OK())
	assert.Zero(t, seen)
	assert.NoFileExists(t, pause)

	notAFolder := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notAFolder, nil, 0o644))
	res = apply(t, h, cfg, "small", Options{}, ApplyOptions{PauseFile: filepath.Join(notAFolder, "pause")})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "pause the KubeVirt device plugin")
	assert.Equal(t, map[string]int{"A10-12Q": 2}, countsOf(t, h)["0000:3b:00.0"], "no write without the pause")
}

// TestPauseFileNeverFollowsALink: a link planted at the pause path (to a
// file standing for the host's disk) is replaced by the pause file and
// then removed; its target is never written. A FIFO there never blocks the
// apply.
func TestPauseFileNeverFollowsALink(t *testing.T) {
	cfg := parse(t, testConfig)
	k, h := fixture(t, "a10-vgpu")
	run := t.TempDir()
	pause := filepath.Join(run, "vgpu-device-manager.pause")
	disk := filepath.Join(t.TempDir(), "sda")
	require.NoError(t, os.WriteFile(disk, []byte("the host's disk"), 0o644))
	require.NoError(t, os.Symlink(disk, pause))
	paused := 0
	k.SetLatency(func(hostsim.Write) time.Duration {
		if fi, err := os.Lstat(pause); err == nil && fi.Mode().IsRegular() {
			paused++
		}
		return 0
	})
	res := apply(t, h, cfg, "small", Options{}, ApplyOptions{PauseFile: pause})
	require.True(t, res.OK(), "%v %v", res.Refused, res.Errors)
	assert.Equal(t, 7, paused, "a regular pause file during the VF enable and each of the six creates")
	b, err := os.ReadFile(disk)
	require.NoError(t, err)
	assert.Equal(t, "the host's disk", string(b), "the link's target is untouched")
	_, err = os.Lstat(pause)
	assert.ErrorIs(t, err, fs.ErrNotExist, "removed after the apply")
	entries, err := os.ReadDir(run)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing left in the run folder")

	require.NoError(t, syscall.Mkfifo(pause, 0o644))
	done := make(chan *Result, 1)
	plan := planOf(t, h, cfg, "default", Options{})
	go func() { done <- Apply(context.Background(), h, plan, ApplyOptions{PauseFile: pause}) }()
	select {
	case res := <-done:
		require.True(t, res.OK(), "%v %v", res.Refused, res.Errors)
	case <-time.After(10 * time.Second):
		t.Fatal("Apply blocked on a FIFO at the pause path")
	}
	_, err = os.Lstat(pause)
	assert.ErrorIs(t, err, fs.ErrNotExist)
}
