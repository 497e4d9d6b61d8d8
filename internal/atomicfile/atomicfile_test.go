package atomicfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "f.json")
	changed, err := Write(p, []byte("a"), 0o644)
	require.NoError(t, err)
	assert.True(t, changed)
	st1, err := os.Stat(p)
	require.NoError(t, err)
	changed, err = Write(p, []byte("a"), 0o644)
	require.NoError(t, err)
	assert.False(t, changed)
	st2, err := os.Stat(p)
	require.NoError(t, err)
	assert.True(t, os.SameFile(st1, st2), "same content is not rewritten")
	changed, err = Write(p, []byte("b"), 0o600)
	require.NoError(t, err)
	assert.True(t, changed)
	b, _ := os.ReadFile(p)
	assert.Equal(t, "b", string(b))
	st3, _ := os.Stat(p)
	assert.Equal(t, os.FileMode(0o600), st3.Mode().Perm())
	entries, _ := os.ReadDir(filepath.Dir(p))
	assert.Len(t, entries, 1, "no temporary file left")

	_, err = Write(filepath.Join(p, "under-a-file"), []byte("x"), 0o644)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "under-a-file")
}
