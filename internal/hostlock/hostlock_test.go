package hostlock

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tryAcquire is Acquire with a short wait: the error when the lock is held.
func tryAcquire(t *testing.T, path string) (func(), error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	return Acquire(ctx, path)
}

func TestAcquireIsExclusiveUntilReleased(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run", "vfio.lock")
	release, err := Acquire(context.Background(), p)
	require.NoError(t, err)
	_, err = tryAcquire(t, p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "held by another process")
	assert.Contains(t, err.Error(), p)
	release()
	again, err := tryAcquire(t, p)
	require.NoError(t, err)
	again()
}

// TestUnlinkedWhileHeldStaysExclusive: the lock file removed while held
// (as a pod that could write the folder would) gives a second Acquire no
// lock of its own: it still waits for the holder.
func TestUnlinkedWhileHeldStaysExclusive(t *testing.T) {
	p := filepath.Join(t.TempDir(), "vfio.lock")
	release, err := Acquire(context.Background(), p)
	require.NoError(t, err)
	require.NoError(t, os.Remove(p))
	_, err = tryAcquire(t, p)
	require.Error(t, err, "a second holder after the unlink")
	assert.Contains(t, err.Error(), "held by another process")
	// Also when the file was created again meanwhile.
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	_, err = tryAcquire(t, p)
	require.Error(t, err)
	release()
	again, err := tryAcquire(t, p)
	require.NoError(t, err)
	again()
}

// TestLinkAtLockPathIsRefused: a symbolic link at the lock path is an
// error naming it; a dangling target is never created, an existing one
// never changed.
func TestLinkAtLockPathIsRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "created-by-the-lock")
	p := filepath.Join(dir, "vgpu.lock")
	require.NoError(t, os.Symlink(target, p))
	_, err := tryAcquire(t, p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), p)
	assert.Contains(t, err.Error(), "symbolic link")
	assert.NoFileExists(t, target)

	disk := filepath.Join(t.TempDir(), "sda")
	require.NoError(t, os.WriteFile(disk, []byte("disk"), 0o644))
	q := filepath.Join(t.TempDir(), "vfio.lock")
	require.NoError(t, os.Symlink(disk, q))
	_, err = tryAcquire(t, q)
	require.ErrorContains(t, err, "symbolic link")
	b, _ := os.ReadFile(disk)
	assert.Equal(t, "disk", string(b))
	fi, _ := os.Stat(disk)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())

	// The failed attempt left the folder's lock free.
	require.NoError(t, os.Remove(q))
	release, err := tryAcquire(t, q)
	require.NoError(t, err)
	release()
}

// TestFIFOAtLockPathIsRefusedPromptly: a FIFO at the lock path is an
// error naming it, not a hang.
func TestFIFOAtLockPathIsRefusedPromptly(t *testing.T) {
	p := filepath.Join(t.TempDir(), "vfio.lock")
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	done := make(chan error, 1)
	go func() { _, err := Acquire(context.Background(), p); done <- err }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), p)
		assert.Contains(t, err.Error(), "not a regular file")
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire blocked on a FIFO")
	}
}

// TestLockDiesWithItsHolder: a holder killed with -9 leaves the lock free
// (the kernel drops it with the process's files).
func TestLockDiesWithItsHolder(t *testing.T) {
	if p := os.Getenv("HOSTLOCK_HOLD"); p != "" {
		if _, err := Acquire(context.Background(), p); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		select {}
	}
	p := filepath.Join(t.TempDir(), "vfio.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockDiesWithItsHolder$")
	cmd.Env = append(os.Environ(), "HOSTLOCK_HOLD="+p)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)
	_, err = tryAcquire(t, p)
	require.Error(t, err, "the other process holds it")
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	release, err := tryAcquire(t, p)
	require.NoError(t, err)
	release()
}
