package host_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

func TestOSWriter(t *testing.T) {
	p := filepath.Join(t.TempDir(), "driver_override")
	testutil.WriteFile(t, p, "(null)\n")
	require.NoError(t, host.OSWriter{}.WriteFile(p, []byte("vfio")))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "vfiol)\n", string(b), "one write at offset 0, no truncation (sysfs semantics)")

	missing := filepath.Join(filepath.Dir(p), "unbind")
	err = host.OSWriter{}.WriteFile(missing, []byte("0000:3b:00.0"))
	require.Error(t, err)
	assert.True(t, errors.Is(err, os.ErrNotExist))
	_, err = os.Stat(missing)
	assert.True(t, os.IsNotExist(err), "the writer never creates files")
}
