package kubevirt

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

func resourcesOf(t *testing.T, s *Scanner) map[string]int {
	t.Helper()
	res, err := s.Scan(context.Background())
	require.NoError(t, err)
	out := map[string]int{}
	for _, r := range res {
		out[r.Name] = len(r.Devices)
	}
	return out
}

// TestNoVGPUWhileTheManagerChangesThem: with the pause file there, no vGPU
// is advertised (the kubelet must not see a half-built set); passthrough
// GPUs are not the vGPU manager's business and stay.
func TestNoVGPUWhileTheManagerChangesThem(t *testing.T) {
	run := t.TempDir()
	state := VGPUState{PauseFile: filepath.Join(run, names.VGPUPauseFile)}
	namer, err := NewNamer("", "")
	require.NoError(t, err)

	k, h := hostsim.NewHost(t, "a10")
	require.NoError(t, k.AddMdev("0000:3b:00.0", "0c0ffee0-0000-4000-8000-000000000001", "nvidia-558", "NVIDIA A10-4Q", 100))
	s := &Scanner{Host: h, Namer: namer, VGPU: state}
	assert.Equal(t, map[string]int{"nvidia.com/NVIDIA_A10-4Q": 1}, resourcesOf(t, s))
	require.NoError(t, os.WriteFile(state.PauseFile, nil, 0o644))
	assert.Empty(t, resourcesOf(t, s), "paused: no vGPU")
	require.NoError(t, os.Remove(state.PauseFile))
	assert.Equal(t, map[string]int{"nvidia.com/NVIDIA_A10-4Q": 1}, resourcesOf(t, s))

	_, hgx := hostsim.NewHost(t, "hgx-h100")
	move(t, hgx, allNVIDIA, vfio.ToVFIO)
	require.NoError(t, os.WriteFile(state.PauseFile, nil, 0o644))
	s = &Scanner{Host: hgx, Namer: namer, VGPU: state}
	assert.Equal(t, 8, resourcesOf(t, s)["nvidia.com/GH100_H100_SXM5_80GB"], "passthrough stays while paused")
	assert.Contains(t, state.Folders(), run)
}

// TestFullCardTypesNamedFromTheManagersReport: a full vendor-VFIO card
// lists no creatable type, so sysfs cannot name the type ids its VFs
// hold; the vGPU manager's report does.
func TestFullCardTypesNamedFromTheManagersReport(t *testing.T) {
	_, h := hostsim.NewHost(t, "l40s-vgpu")
	cfg, err := vgpuconfig.Default()
	require.NoError(t, err)
	plan, err := vgpu.PlanConfig(context.Background(), h, cfg, "L40S-24Q", vgpu.Options{NodeName: "n"})
	require.NoError(t, err)
	require.True(t, vgpu.Apply(context.Background(), h, plan, vgpu.ApplyOptions{}).OK())
	namer, err := NewNamer("", "")
	require.NoError(t, err)

	var logged []string
	s := &Scanner{Host: h, Namer: namer, Log: funcr.New(func(p, a string) { logged = append(logged, a) }, funcr.Options{})}
	assert.Empty(t, resourcesOf(t, s), "without the report the full cards' type cannot be named: nothing is advertised, never a resource named after the id")
	assert.Len(t, logged, 4, "one line per VF left out")
	assert.Contains(t, logged[0], `"typeId"=1155`)
	resourcesOf(t, s)
	assert.Len(t, logged, 4, "logged once, not every scan")

	ready := filepath.Join(t.TempDir(), names.VGPUReadyFile)
	b, err := json.Marshal(map[string]any{"gpus": []map[string]any{{"typeIds": map[string]string{"1155": "L40S-24Q"}}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(ready, b, 0o644))
	s.VGPU.ReadyFile = ready
	assert.Equal(t, map[string]int{"nvidia.com/NVIDIA_L40S-24Q": 4}, resourcesOf(t, s))

	require.NoError(t, os.WriteFile(ready, []byte("{garbage"), 0o644))
	assert.Empty(t, VGPUState{ReadyFile: ready}.TypeNames(), "an unreadable report names nothing")
}

// TestH100NamedFromTheManagersOwnReport: the vGPU manager applies the
// default config on an H100 (H100-40C: 2 fills the card; no table holds
// its ids) and writes its ready report as Run does; the plugin advertises
// nvidia.com/NVIDIA_H100-40C from it, never a resource named after the id;
// a vGPU of an id the report does not name is left out.
func TestH100NamedFromTheManagersOwnReport(t *testing.T) {
	k, err := hostsim.H100VGPU().Build(t.TempDir())
	require.NoError(t, err)
	h := host.New(k.Options())
	cfg, err := vgpuconfig.Default()
	require.NoError(t, err)
	run := t.TempDir()
	mem, err := vgpu.LoadTypeMemory(filepath.Join(run, names.VGPUTypesFile), nil)
	require.NoError(t, err)
	plan, err := vgpu.PlanConfig(context.Background(), h, cfg, vgpuconfig.DefaultName, vgpu.Options{NodeName: "n", TypeNames: mem})
	require.NoError(t, err)
	res := vgpu.Apply(context.Background(), h, plan, vgpu.ApplyOptions{})
	require.True(t, res.OK(), "%v", res.Refused)
	ready := filepath.Join(run, names.VGPUReadyFile)
	require.NoError(t, wire.WriteVGPUReady(ready, wire.VGPUReady{Config: vgpuconfig.DefaultName, State: wire.VGPUStateSuccess, GPUs: vgpu.ReadyGPUs([]*vgpu.GPU{res.GPUs[0].GPU})}))
	namer, err := NewNamer("", "")
	require.NoError(t, err)

	s := &Scanner{Host: h, Namer: namer, VGPU: VGPUState{ReadyFile: ready}, Log: logr.Discard()}
	assert.Equal(t, map[string]int{"nvidia.com/NVIDIA_H100-40C": 2}, resourcesOf(t, s))

	require.NoError(t, k.SetVGPU("0000:5d:00.6", 700, map[int]string{}))
	assert.Equal(t, map[string]int{"nvidia.com/NVIDIA_H100-40C": 2}, resourcesOf(t, s), "type id 700, named by nobody, is no resource")
}

// TestVGPUStateNeverFollowsOrBlocks: anything at the pause path pauses
// (a link there is never followed, its target untouched); a FIFO, a link or
// a huge file at the ready path names no type, at once.
func TestVGPUStateNeverFollowsOrBlocks(t *testing.T) {
	run := t.TempDir()
	outside := filepath.Join(t.TempDir(), "report")
	b, err := json.Marshal(map[string]any{"gpus": []map[string]any{{"typeIds": map[string]string{"1155": "L40S-24Q"}}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(outside, b, 0o644))
	state := VGPUState{PauseFile: filepath.Join(run, names.VGPUPauseFile), ReadyFile: filepath.Join(run, names.VGPUReadyFile)}

	require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "missing"), state.PauseFile))
	assert.True(t, state.Paused(), "a dangling link pauses: something is there")
	require.NoError(t, os.Remove(state.PauseFile))
	assert.False(t, state.Paused())

	require.NoError(t, os.Symlink(outside, state.ReadyFile))
	assert.Empty(t, state.TypeNames(), "a link is not read through")
	require.NoError(t, os.Remove(state.ReadyFile))

	require.NoError(t, syscall.Mkfifo(state.ReadyFile, 0o644))
	done := make(chan map[int]string, 1)
	go func() { done <- state.TypeNames() }()
	select {
	case got := <-done:
		assert.Empty(t, got)
	case <-time.After(5 * time.Second):
		t.Fatal("TypeNames blocked on a FIFO")
	}
	require.NoError(t, os.Remove(state.ReadyFile))

	require.NoError(t, os.WriteFile(state.ReadyFile, append(b, bytes.Repeat([]byte(" "), atomicfile.MaxSize)...), 0o644))
	assert.Empty(t, state.TypeNames(), "over the bound (valid JSON padded with spaces): not read")
	require.NoError(t, os.WriteFile(state.ReadyFile, b, 0o644))
	assert.Equal(t, map[int]string{1155: "NVIDIA L40S-24Q"}, state.TypeNames(), "the same report as a regular file")
	after, _ := os.ReadFile(outside)
	assert.Equal(t, b, after)
}
