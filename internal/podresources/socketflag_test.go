package podresources

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSocketFlagOpen: no kubelet to ask when the flag is empty or the
// default socket is absent; a socket given explicitly must exist.
func TestSocketFlagOpen(t *testing.T) {
	absent := filepath.Join(t.TempDir(), "kubelet.sock")
	f := NewSocketFlag(absent)
	c, err := f.Open(time.Second)
	require.NoError(t, err, "the default absent")
	assert.Nil(t, c)

	require.NoError(t, f.Set(""))
	c, err = f.Open(time.Second)
	require.NoError(t, err, "set empty")
	assert.Nil(t, c)
	assert.Empty(t, f.Path())

	require.NoError(t, f.Set(absent))
	_, err = f.Open(time.Second)
	require.Error(t, err, "given explicitly and absent")
	assert.Contains(t, err.Error(), absent)
	assert.Equal(t, absent, f.String())
}
