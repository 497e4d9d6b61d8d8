// Package hostlock is the host-wide exclusive lock (flock) the node
// daemons that change a host's devices hold: the VFIO manager's CLI and
// daemon, the vGPU device manager, and their release modes. The kernel
// drops it when its holder dies, so a daemon killed with -9 never leaves it
// taken.
//
// The lock is taken on the lock file's folder (its writer's run folder,
// which only the privileged daemons mount writable), not on the file
// alone: a lock file unlinked while held, and created again by the next
// process, would give that process a lock of its own on a new inode; the
// folder, a mount point in the daemons' pods, cannot be swapped that way.
// So one folder holds one lock. The file is still opened (without
// following a link: a link there is an error naming it, its target never
// created) and locked too, so that tools that list locks name it.
package hostlock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Acquire takes the lock of path (its folder's), waiting until ctx ends.
// Locks are per open file, so two holders in one process exclude each
// other too.
func Acquire(ctx context.Context, path string) (release func(), err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock %s: folder: %w", path, err)
	}
	if err := wait(ctx, d, path); err != nil {
		d.Close()
		return nil, err
	}
	f, err := openFile(path)
	if err == nil {
		// Every holder takes the folder first: the file is free.
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			err = fmt.Errorf("lock %s: %w", path, err)
		}
	}
	if err != nil {
		_ = unix.Flock(int(d.Fd()), unix.LOCK_UN)
		d.Close()
		return nil, err
	}
	return func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
		_ = unix.Flock(int(d.Fd()), unix.LOCK_UN)
		d.Close()
	}, nil
}

// openFile opens or creates the lock file, never through a link and never
// anything but a regular file.
func openFile(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("lock %s: a symbolic link, not followed", path)
	} else if err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("lock %s: not a regular file (%s), not opened", path, fi.Mode().Type())
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("lock %s: a symbolic link, not followed: %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// wait flocks d, polling until ctx ends.
func wait(ctx context.Context, d *os.File, path string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lock %s: held by another process: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
