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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
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

	s := &Scanner{Host: h, Namer: namer}
	for name := range resourcesOf(t, s) {
		assert.NotEqual(t, "nvidia.com/NVIDIA_L40S-24Q", name, "without the report the full cards' type cannot be named from sysfs")
	}

	ready := filepath.Join(t.TempDir(), names.VGPUReadyFile)
	b, err := json.Marshal(map[string]any{"gpus": []map[string]any{{"typeIds": map[string]string{"1155": "L40S-24Q"}}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(ready, b, 0o644))
	s.VGPU.ReadyFile = ready
	assert.Equal(t, map[string]int{"nvidia.com/NVIDIA_L40S-24Q": 4}, resourcesOf(t, s))

	require.NoError(t, os.WriteFile(ready, []byte("{garbage"), 0o644))
	assert.Empty(t, VGPUState{ReadyFile: ready}.TypeNames(), "an unreadable report names nothing")
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
