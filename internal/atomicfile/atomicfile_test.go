package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// outside is a file outside the run folder standing for /dev/sda; it
// returns a check that it is unchanged.
func outside(t *testing.T) (path string, unchanged func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "sda")
	require.NoError(t, os.WriteFile(path, []byte("the host's disk"), 0o644))
	return path, func() {
		t.Helper()
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, "the host's disk", string(b), "the link's target is untouched")
	}
}

// TestWriteReplacesALinkNeverItsTarget: a symbolic link planted at the
// path (to a file outside the folder, and a dangling one) is replaced by
// the new file; its target is neither written nor created.
func TestWriteReplacesALinkNeverItsTarget(t *testing.T) {
	dir := t.TempDir()
	disk, unchanged := outside(t)
	p := filepath.Join(dir, "vgpu-device-manager.pause")
	require.NoError(t, os.Symlink(disk, p))
	changed, err := Write(p, []byte("paused\n"), 0o644)
	require.NoError(t, err)
	assert.True(t, changed)
	unchanged()
	fi, err := os.Lstat(p)
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular(), "the link itself was replaced")

	dangling := filepath.Join(t.TempDir(), "never-created")
	q := filepath.Join(dir, "ready")
	require.NoError(t, os.Symlink(dangling, q))
	_, err = Write(q, []byte("x"), 0o644)
	require.NoError(t, err)
	assert.NoFileExists(t, dangling)

	// The same content behind a link still counts as a change: the link
	// is never read through.
	r := filepath.Join(dir, "same")
	require.NoError(t, os.Symlink(disk, r))
	changed, err = Write(r, []byte("the host's disk"), 0o644)
	require.NoError(t, err)
	assert.True(t, changed)
	fi, _ = os.Lstat(r)
	assert.True(t, fi.Mode().IsRegular())
}

// TestWriteNeverOpensAFIFO: a FIFO at the path (nobody writing it) would
// block a reader of the old content forever; the writer replaces it at
// once.
func TestWriteNeverOpensAFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "vfio-manager.ready")
	require.NoError(t, syscall.Mkfifo(p, 0o644))
	done := make(chan error, 1)
	go func() { _, err := Write(p, []byte("{}\n"), 0o644); done <- err }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Write blocked on a FIFO")
	}
	b, err := Read(p)
	require.NoError(t, err)
	assert.Equal(t, "{}\n", string(b))
}

// TestReadRefusesWhatIsNoRegularFile: a link (to a file outside, or
// dangling), a FIFO, a folder and a file over the bound are each an
// error naming the path, returned promptly; a missing file matches
// fs.ErrNotExist.
func TestReadRefusesWhatIsNoRegularFile(t *testing.T) {
	dir := t.TempDir()
	disk, unchanged := outside(t)
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(disk, link))
	dangling := filepath.Join(dir, "dangling")
	require.NoError(t, os.Symlink(filepath.Join(dir, "nothing"), dangling))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o755))
	huge := filepath.Join(dir, "huge")
	require.NoError(t, os.WriteFile(huge, make([]byte, MaxSize+1), 0o644))
	for path, want := range map[string]string{link: "symbolic link", dangling: "symbolic link", fifo: "FIFO", sub: "not a regular file", huge: "over the"} {
		done := make(chan error, 1)
		go func() { _, err := Read(path); done <- err }()
		select {
		case err := <-done:
			require.Error(t, err, path)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), want)
			assert.False(t, errors.Is(err, fs.ErrNotExist), path)
		case <-time.After(5 * time.Second):
			t.Fatalf("Read(%s) blocked", path)
		}
	}
	unchanged()

	_, err := Read(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), "missing")

	exact := filepath.Join(dir, "exact")
	require.NoError(t, os.WriteFile(exact, []byte(strings.Repeat("x", 10)), 0o644))
	b, err := ReadMax(exact, 10)
	require.NoError(t, err)
	assert.Len(t, b, 10)
	_, err = ReadMax(exact, 9)
	require.ErrorContains(t, err, "over the 9")
}

// TestRemoveUnlinksTheLinkItself: removing a path that is a link removes
// the link, never its target; a missing path is no error.
func TestRemoveUnlinksTheLinkItself(t *testing.T) {
	dir := t.TempDir()
	disk, unchanged := outside(t)
	p := filepath.Join(dir, "pause")
	require.NoError(t, os.Symlink(disk, p))
	require.NoError(t, Remove(p))
	_, err := os.Lstat(p)
	require.ErrorIs(t, err, fs.ErrNotExist)
	unchanged()
	require.NoError(t, Remove(p))
	err = Remove(dir)
	require.Error(t, err, "a folder is not removed")
	assert.Contains(t, err.Error(), dir)
}
