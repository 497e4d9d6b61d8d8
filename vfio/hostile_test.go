package vfio

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// TestDaemonReplacesAFIFOAtTheReadyPath: a FIFO planted at the ready path
// (nobody on its other end) neither blocks the daemon's write nor its
// readers: the daemon replaces it with its report and stays stoppable;
// before that, a reader gets an error naming the path at once.
func TestDaemonReplacesAFIFOAtTheReadyPath(t *testing.T) {
	_, h := buildFixture(t, "a10")
	dir := t.TempDir()
	path := filepath.Join(dir, names.VFIOReadyFile)
	require.NoError(t, syscall.Mkfifo(path, 0o644))

	read := make(chan error, 1)
	go func() { _, err := wire.ReadVFIOReady(path); read <- err }()
	select {
	case err := <-read:
		require.Error(t, err)
		assert.Contains(t, err.Error(), path)
		assert.Contains(t, err.Error(), "FIFO")
	case <-time.After(5 * time.Second):
		t.Fatal("ReadReadyFile blocked on a FIFO")
	}
	assert.False(t, wire.VFIOIsReady(path))

	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, ReadyDir: dir, Heartbeat: 20 * time.Millisecond, Log: logr.Discard()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	eventually(t, "the daemon's report in place of the FIFO", func() bool { return wire.VFIOIsReady(path) })
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	_, err = os.Lstat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "a graceful stop removes the file")
}

// TestReadyFileReadersRefuseLinksAndHugeFiles: a link at the ready path
// (to a file outside the folder holding a ready report) and a file over
// atomicfile.MaxSize are errors naming the path, never read through or
// read whole; the daemon replaces the link, never writing its target.
func TestReadyFileReadersRefuseLinksAndHugeFiles(t *testing.T) {
	_, h := buildFixture(t, "a10")
	dir := t.TempDir()
	path := filepath.Join(dir, names.VFIOReadyFile)

	// A ready report outside, as a live daemon's would be.
	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, ReadyDir: t.TempDir(), Heartbeat: time.Hour, Log: logr.Discard()})
	require.NoError(t, err)
	_, err = d.Reconcile(context.Background())
	require.NoError(t, err)
	outside := filepath.Join(d.opts.ReadyDir, names.VFIOReadyFile)
	require.True(t, wire.VFIOIsReady(outside))
	before, err := os.ReadFile(outside)
	require.NoError(t, err)

	require.NoError(t, os.Symlink(outside, path))
	_, err = wire.ReadVFIOReady(path)
	require.ErrorContains(t, err, path)
	assert.ErrorContains(t, err, "symbolic link")
	assert.False(t, wire.VFIOIsReady(path), "a link to a ready report is no readiness")

	w, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, ReadyDir: dir, Heartbeat: time.Hour, Log: logr.Discard()})
	require.NoError(t, err)
	_, err = w.Reconcile(context.Background())
	require.NoError(t, err)
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the link was replaced")
	after, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the link's target is untouched")

	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, make([]byte, atomicfile.MaxSize+1), 0o644))
	_, err = wire.ReadVFIOReady(path)
	require.ErrorContains(t, err, path)
	assert.ErrorContains(t, err, "over the")
}
