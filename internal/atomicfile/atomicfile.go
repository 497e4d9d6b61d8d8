// Package atomicfile writes and reads the small files the node daemons
// exchange in their run folders (ready, pause and permittedHostDevices
// files), safely even when something else could plant a file there:
//
//   - Write creates a new temporary file in the same folder (O_EXCL and
//     O_NOFOLLOW: never an existing file, never through a link), fsyncs it
//     and renames it over the path. It never opens what is at the path: a
//     symbolic link there is replaced, never followed; a FIFO is replaced,
//     never opened (so never blocks the writer).
//   - Read opens only a regular file, without following a link and without
//     blocking (O_NOFOLLOW|O_NONBLOCK), checks it with fstat and reads at
//     most MaxSize bytes: a link, a FIFO, a device or a bigger file is an
//     error naming the path.
//   - Remove unlinks the path itself (a link, never its target).
package atomicfile

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MaxSize bounds what Read reads: the run folders' files are a few KiB.
const MaxSize = 1 << 20

// Write replaces path with data through a new temporary file in the same
// folder, fsynced, and a rename (then the folder is fsynced too). It
// returns changed=false, and writes nothing, when the file already holds
// exactly data: what is there is read with Read, so a link or FIFO at path
// counts as a change and is replaced.
func Write(path string, data []byte, perm os.FileMode) (changed bool, err error) {
	if old, err := Read(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := createTemp(path)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = syscall.Unlink(tmp.Name())
		}
	}()
	if err := fill(tmp, data, perm); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	renamed = true
	if err := syncDir(dir); err != nil {
		return true, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}

// createTemp creates a new file beside path, never an existing one and
// never through a link.
func createTemp(path string) (*os.File, error) {
	for range 100 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		name := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+hex.EncodeToString(b[:]))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, errors.New("no free temporary file name")
}

// fill writes data to f, sets perm, fsyncs and closes it.
func fill(f *os.File, data []byte, perm os.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Read returns the content of the regular file at path, at most MaxSize
// bytes. A missing file is an error that matches fs.ErrNotExist; a link,
// anything but a regular file, or a file over MaxSize is an error naming
// path. It never blocks on a FIFO and never opens a device.
func Read(path string) ([]byte, error) { return ReadMax(path, MaxSize) }

// ReadMax is Read with its own bound.
func ReadMax(path string, limit int64) ([]byte, error) {
	// Look before opening: a device node or FIFO is never opened at all.
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := regular(path, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link, not followed: %w", path, err)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// What was opened is what was looked at, a regular file.
	if err := regular(path, st); err != nil {
		return nil, err
	}
	if !os.SameFile(fi, st) {
		return nil, fmt.Errorf("%s was replaced while being opened", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, over the %d a reader accepts", path, st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s grew over the %d bytes a reader accepts", path, limit)
	}
	return b, nil
}

// regular is nil for a regular file, else an error naming path and what
// it is.
func regular(path string, fi os.FileInfo) error {
	m := fi.Mode()
	switch {
	case m.IsRegular():
		return nil
	case m&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link, not followed", path)
	case m&os.ModeNamedPipe != 0:
		return fmt.Errorf("%s is a FIFO, not a regular file", path)
	default:
		return fmt.Errorf("%s is not a regular file (%s)", path, m.Type())
	}
}

// Remove unlinks path: a link is removed itself, its target never
// touched. A missing path is no error.
func Remove(path string) error {
	err := syscall.Unlink(path)
	if err == nil || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return &fs.PathError{Op: "remove", Path: path, Err: err}
}
