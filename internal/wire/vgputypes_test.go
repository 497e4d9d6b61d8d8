package wire

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// TestVGPUTypeNamesRoundTripAndRefuseBadEntries: the manager's memory of
// type names reads back whole, a missing file is an empty memory, and a
// bad id or name (in the file or given to the writer) is an error naming
// the file, the GPU and the entry, never taken as a name.
func TestVGPUTypeNamesRoundTripAndRefuseBadEntries(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, names.VGPUTypesFile)
	empty, err := ReadVGPUTypeNames(path)
	require.NoError(t, err, "no file yet")
	assert.Empty(t, empty.GPUs)

	m := VGPUTypeNames{GPUs: map[string]map[string]string{"0000:5d:00.0": {"1425": "H100-40C", "1424": "H100-20C"}}}
	require.NoError(t, WriteVGPUTypeNames(path, m))
	back, err := ReadVGPUTypeNames(path)
	require.NoError(t, err)
	assert.Equal(t, m, back)
	assert.True(t, sameFileAfter(t, path, func() error { return WriteVGPUTypeNames(path, m) }), "unchanged memory is not rewritten")

	for _, bad := range []struct{ json, want string }{
		{`{"gpus":{"0000:5d:00.0":{"0":"H100-40C"}}}`, `invalid vGPU type id "0"`},
		{`{"gpus":{"0000:5d:00.0":{"x1":"H100-40C"}}}`, `invalid vGPU type id "x1"`},
		{`{"gpus":{"0000:5d:00.0":{"01425":"H100-40C"}}}`, `invalid vGPU type id "01425"`},
		{`{"gpus":{"0000:5d:00.0":{"1425":"H100/../40C"}}}`, `invalid vGPU type name`},
		{`{"gpus":{"0000:5d:00.0":{"1425":"H100 40C\n"}}}`, `invalid vGPU type name`},
		{`{"gpus":{"0000:5d:00.0":{"1425":""}}}`, `invalid vGPU type name`},
		{`{"gpus":{"":{"1425":"H100-40C"}}}`, `without an address`},
	} {
		require.NoError(t, os.WriteFile(path, []byte(bad.json), 0o644))
		_, err := ReadVGPUTypeNames(path)
		require.ErrorContains(t, err, path, bad.json)
		assert.ErrorContains(t, err, bad.want, bad.json)
	}
	err = WriteVGPUTypeNames(path, VGPUTypeNames{GPUs: map[string]map[string]string{"0000:5d:00.0": {"1425": "a/b"}}})
	require.ErrorContains(t, err, path)
	b, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	assert.Contains(t, string(b), `""`, "an invalid memory writes nothing")
}
