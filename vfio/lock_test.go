package vfio

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLockIsExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "vfio.lock")
	release, err := AcquireLock(context.Background(), path)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = AcquireLock(ctx, path)
	require.Error(t, err, "a second holder must wait while the first holds the lock")
	assert.Contains(t, err.Error(), path)

	release()
	release2, err := AcquireLock(context.Background(), path)
	require.NoError(t, err, "free again after release")
	release2()
}
