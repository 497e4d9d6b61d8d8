package vgpu

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/jsonout"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReportJSONKeys pins the documented keys of plan and apply JSON.
func TestReportJSONKeys(t *testing.T) {
	cfg := parse(t, testConfig)
	k, h := fixture(t, "t4-vgpu") // mdev on the GPU itself
	p := planOf(t, h, cfg, "default", Options{})
	var buf bytes.Buffer
	require.NoError(t, jsonout.Write(&buf, PlanReport(p)))
	var got map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	assert.ElementsMatch(t, []string{"file", "config", "dryRun", "gpus", "actions", "refused"}, keys(got))
	assert.Equal(t, true, got["dryRun"])
	gpu := got["gpus"].([]any)[0].(map[string]any)
	assert.ElementsMatch(t, []string{"index", "address", "device", "backend", "managed", "want", "have", "types"}, keys(gpu))
	assert.Equal(t, "10de:1eb8", gpu["device"])
	assert.Equal(t, "mdev", gpu["backend"])
	typ := gpu["types"].([]any)[0].(map[string]any)
	assert.ElementsMatch(t, []string{"name", "id", "max", "maxFrom"}, keys(typ))
	act := got["actions"].([]any)[0].(map[string]any)
	assert.ElementsMatch(t, []string{"op", "gpu", "address", "id", "type", "typeId", "parent"}, keys(act))
	assert.Equal(t, "create", act["op"])
	assert.Equal(t, []any{}, got["refused"])

	require.True(t, Apply(t.Context(), h, p, ApplyOptions{}).OK())
	m, ok, err := h.ReadMdev(StableUUID(testNode, "0000:3b:00.0", 0))
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, k.HoldOpen(7000, "qemu-kvm", "vfio/"+strconv.Itoa(m.IOMMUGroup)))
	res := apply(t, h, cfg, "small", Options{}, ApplyOptions{})
	buf.Reset()
	require.NoError(t, jsonout.Write(&buf, ResultReport(res)))
	got = map[string]any{}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	assert.Equal(t, false, got["dryRun"])
	ref := got["refused"].([]any)[0].(map[string]any)
	assert.ElementsMatch(t, []string{"gpu", "address", "reason"}, keys(ref))
	assert.Contains(t, ref["reason"], "in use: ")
	assert.Equal(t, map[string]any{"T4-8Q": float64(2)}, got["gpus"].([]any)[0].(map[string]any)["have"])
}

func TestWriteTable(t *testing.T) {
	cfg := parse(t, testConfig)
	_, h := fixture(t, "a100-sriov-vgpu")
	var buf bytes.Buffer
	require.NoError(t, WriteTable(&buf, PlanReport(planOf(t, h, cfg, "default", Options{}))))
	out := buf.String()
	assert.Contains(t, out, `Config "default" of test.yaml`)
	assert.Contains(t, out, "0000:41:00.0  10de:20f1  sriov")
	assert.Contains(t, out, "enable-vfs  -         16 VFs")
	assert.Contains(t, out, "PLANNED")
	buf.Reset()
	res := apply(t, h, cfg, "default", Options{}, ApplyOptions{})
	require.NoError(t, WriteTable(&buf, ResultReport(res)))
	assert.Contains(t, buf.String(), "mdev-sriov")
	assert.Contains(t, buf.String(), "A100-10C=4")
	assert.Contains(t, buf.String(), "DONE")
	buf.Reset()
	require.NoError(t, WriteTable(&buf, PlanReport(planOf(t, h, cfg, "default", Options{}))))
	assert.Contains(t, buf.String(), "Nothing to do")
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
