package vgpu

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// h100 builds hostsim.H100VGPU: a card whose type ids no table names.
func h100(t *testing.T) (*hostsim.Kernel, *host.Host) {
	t.Helper()
	k, err := hostsim.H100VGPU().Build(t.TempDir())
	require.NoError(t, err)
	return k, host.New(k.Options())
}

// TestFullCardNamedFromWhatTheDriverListed: on an H100 with the default
// config (H100-40C: 2, which fills the card: the driver then lists no type
// anywhere), the first apply creates; a second pass and a manager started
// afresh over the same run folder write nothing and refuse nothing; the
// ready report names the id. The names come from what the driver listed
// before the creates, kept in the run folder: nothing else names 1425.
func TestFullCardNamedFromWhatTheDriverListed(t *testing.T) {
	k, h := h100(t)
	cfg, err := vgpuconfig.Default()
	require.NoError(t, err)
	run := t.TempDir()
	file := filepath.Join(run, names.VGPUTypesFile)
	manager := func() *TypeMemory { // a new process over the same run folder
		m, err := LoadTypeMemory(file, nil)
		require.NoError(t, err)
		return m
	}

	mem := manager()
	res := Apply(t.Context(), h, planOf(t, h, cfg, vgpuconfig.DefaultName, Options{TypeNames: mem}), ApplyOptions{})
	require.True(t, res.OK(), "%v", res.Refused)
	require.Equal(t, map[string]int{"NVIDIA H100-40C": 2}, k.VGPUCounts("0000:5d:00.0"))
	v, ok, err := h.VGPU("0000:5d:00.6")
	require.NoError(t, err)
	require.True(t, ok)
	require.Empty(t, v.Creatable, "the card is full: the driver lists nothing")

	for name, namer := range map[string]*TypeMemory{"second pass": mem, "restarted manager": manager()} {
		k.ResetWrites()
		p := planOf(t, h, cfg, vgpuconfig.DefaultName, Options{TypeNames: namer})
		assert.Empty(t, p.Refusals(), name)
		assert.False(t, p.Changes(), "%s: %v", name, PlanReport(p).Actions)
		again := Apply(t.Context(), h, p, ApplyOptions{})
		assert.True(t, again.OK(), "%s: %v", name, again.Refused)
		assert.Empty(t, k.Writes(), name)
		ready := ReadyGPUs([]*GPU{again.GPUs[0].GPU})
		assert.Equal(t, map[string]int{"H100-40C": 2}, ready[0].VGPUs, name)
		assert.Equal(t, "H100-40C", ready[0].TypeIDs["1425"], name)
		assert.Empty(t, ready[0].Unnamed, name)
	}
	back, err := wire.ReadVGPUTypeNames(file)
	require.NoError(t, err)
	assert.Equal(t, "H100-40C", back.GPUs["0000:5d:00.0"]["1425"], "remembered in the run folder")
}

// TestUnnamedIDIsReportedNotGuessed: a full card whose ids no list, no
// memory and no NVML name (the run folder lost) is refused naming the GPU,
// the VF and the id, and reported as unnamed, never counted as a type; a
// TypeNamer (NVML's stand-in) that names the id lets it apply.
func TestUnnamedIDIsReportedNotGuessed(t *testing.T) {
	k, h := h100(t)
	cfg, err := vgpuconfig.Default()
	require.NoError(t, err)
	require.True(t, Apply(t.Context(), h, planOf(t, h, cfg, vgpuconfig.DefaultName, Options{}), ApplyOptions{}).OK())

	lost := filepath.Join(t.TempDir(), names.VGPUTypesFile)
	m, err := LoadTypeMemory(lost, nil)
	require.NoError(t, err)
	k.ResetWrites()
	p := planOf(t, h, cfg, vgpuconfig.DefaultName, Options{TypeNames: m})
	require.Len(t, p.Refusals(), 1)
	reason := p.Refusals()[0].Reason
	for _, want := range []string{"unknown vGPU type", "GPU 0 (0000:5d:00.0, 10de:2331)", "VF 0000:5d:00.4", "type id 1425"} {
		assert.Contains(t, reason, want)
	}
	res := Apply(t.Context(), h, p, ApplyOptions{})
	assert.Empty(t, k.Writes(), "a refused GPU is left as it is")
	ready := ReadyGPUs([]*GPU{res.GPUs[0].GPU})
	assert.Empty(t, ready[0].VGPUs, "an unnamed vGPU is counted as no type")
	assert.Equal(t, map[string]string{"0000:5d:00.4": "1425", "0000:5d:00.5": "1425"}, ready[0].Unnamed)
	_, err = os.Stat(lost)
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing new learned, nothing written")

	nvml := TypeNamesFunc(func(gpu host.Address) (map[int]string, error) {
		return map[int]string{1425: "NVIDIA H100-40C"}, nil
	})
	m, err = LoadTypeMemory(lost, nvml)
	require.NoError(t, err)
	p = planOf(t, h, cfg, vgpuconfig.DefaultName, Options{TypeNames: m})
	assert.Empty(t, p.Refusals())
	assert.False(t, p.Changes())
	back, err := wire.ReadVGPUTypeNames(lost)
	require.NoError(t, err)
	assert.Equal(t, "H100-40C", back.GPUs["0000:5d:00.0"]["1425"], "what the fallback named is remembered")
}

// TestTypeMemoryRefusesABadFile: a planted bad memory is an error naming
// the file; the manager starts empty and its first lesson replaces it.
func TestTypeMemoryRefusesABadFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), names.VGPUTypesFile)
	require.NoError(t, os.WriteFile(file, []byte(`{"gpus":{"not-an-address":{"1425":"H100-40C"}}}`), 0o644))
	m, err := LoadTypeMemory(file, nil)
	require.ErrorContains(t, err, file)
	assert.Empty(t, m.Remembered("0000:5d:00.0"))
	m.Learn("0000:5d:00.0", map[int]string{1425: "H100-40C", 7: "bad/name"})
	require.NoError(t, m.Save())
	back, err := wire.ReadVGPUTypeNames(file)
	require.NoError(t, err)
	assert.Equal(t, map[string]map[string]string{"0000:5d:00.0": {"1425": "H100-40C"}}, back.GPUs, "a name the file cannot hold is not learned")
}
