//go:build realkernelguest

package guest

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// write is one sysfs write the host model made.
type write struct{ path, data string }

func (w write) String() string { return fmt.Sprintf("%q to %s", w.data, w.path) }

// recordingWriter writes through host.OSWriter and records every write. A path it is told
// would block (a remove or sriov_numvfs write under a held device: the kernel blocks the writer,
// unkillably, until the holder lets go) is recorded and refused instead of written, so that a
// missed in-use check fails the test rather than hanging the guest.
type recordingWriter struct {
	mu       sync.Mutex
	writes   []write
	blocking map[string]bool
}

func (r *recordingWriter) WriteFile(path string, data []byte) error {
	r.mu.Lock()
	r.writes = append(r.writes, write{path, string(data)})
	refuse := r.blocking[filepath.Clean(path)]
	r.mu.Unlock()
	if refuse {
		return fmt.Errorf("test guard: %q to %s would block while the device is held; not written", data, path)
	}
	return host.OSWriter{}.WriteFile(path, data)
}

// mark returns the number of writes so far, for since.
func (r *recordingWriter) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.writes)
}

// since returns the writes after mark.
func (r *recordingWriter) since(mark int) []write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]write(nil), r.writes[mark:]...)
}

// guard refuses writes to path until the returned function is called.
func (r *recordingWriter) guard(path string) (unguard func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blocking == nil {
		r.blocking = map[string]bool{}
	}
	path = filepath.Clean(path)
	r.blocking[path] = true
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.blocking, path)
	}
}

// newHost is the host model over the guest's own /sys, /dev and /proc, writing through rec.
func newHost(rec *recordingWriter) *host.Host {
	return host.New(host.Options{Writer: rec})
}

// requireWrites checks that the writes after mark are exactly want (path suffix and data).
func requireWrites(t *testing.T, rec *recordingWriter, mark int, want ...write) {
	t.Helper()
	got := rec.since(mark)
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasSuffix(got[i].path, want[i].path) && got[i].data == want[i].data
	}
	if !ok {
		t.Errorf("writes: got %v, want %v", got, want)
	}
}

// requireNoWriteTo checks that no write after mark went to a path ending in suffix.
func requireNoWriteTo(t *testing.T, rec *recordingWriter, mark int, suffix string) {
	t.Helper()
	for _, w := range rec.since(mark) {
		if strings.HasSuffix(w.path, suffix) {
			t.Errorf("write %v attempted while the device is held", w)
		}
	}
}

// newUUID returns a random (version 4) UUID in the form mdev names use.
func newUUID(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// isCharDevice reports whether path is a character device node.
func isCharDevice(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
