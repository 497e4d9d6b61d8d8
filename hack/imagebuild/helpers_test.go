package main

import (
	"archive/tar"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// fakeELF returns a minimal x86-64 ELF executable header followed by
// payload: enough for debug/elf, and a static binary (no PT_INTERP).
func fakeELF(payload string) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF")
	h[4], h[5], h[6] = 2, 1, 1                // 64-bit, little endian, version 1
	binary.LittleEndian.PutUint16(h[16:], 2)  // ET_EXEC
	binary.LittleEndian.PutUint16(h[18:], 62) // EM_X86_64
	binary.LittleEndian.PutUint32(h[20:], 1)  // EV_CURRENT
	binary.LittleEndian.PutUint16(h[52:], 64) // header size
	binary.LittleEndian.PutUint16(h[54:], 56) // program header size
	binary.LittleEndian.PutUint16(h[58:], 64) // section header size
	return append(h, payload...)
}

var testTime = time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)

// fakeRepo makes a repository root with cmd/<b> for each binary (plus the
// demo and a folder without Go files, which are no shipped binary) and a
// bin folder of fake static binaries, and returns build options for it.
func fakeRepo(t *testing.T, bins ...string) Options {
	t.Helper()
	root := t.TempDir()
	for _, b := range append([]string{"sandbox-gpu-demo"}, bins...) {
		write(t, filepath.Join(root, "cmd", b, "main.go"), "// Command "+b+" does fake things. More text.\npackage main\n\nfunc main() {}\n", 0o644)
		write(t, filepath.Join(root, "bin", b), string(fakeELF("binary "+b)), 0o755)
	}
	if err := os.MkdirAll(filepath.Join(root, "cmd", "no-go-files"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Options{
		Root:     root,
		BinDir:   filepath.Join(root, "bin"),
		OutDir:   filepath.Join(root, "out"),
		Registry: DefaultRegistry,
		Version:  DefaultVersion,
		Revision: "0123456789abcdef0123456789abcdef01234567",
		Created:  testTime,
	}
}

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// entry is what a test checks of a layer's tar entry.
type entry struct {
	Name     string
	Type     byte
	Mode     int64
	UID, GID int
	Link     string
	Data     string
	ModTime  time.Time
	Uname    string
	Gname    string
}

func layerEntries(t *testing.T, l v1.Layer) []entry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var out []entry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{Name: h.Name, Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid,
			Link: h.Linkname, Data: string(data), ModTime: h.ModTime.UTC(), Uname: h.Uname, Gname: h.Gname})
	}
}

// unpack applies an image's layers (which hold no whiteouts) to dir.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		for _, e := range layerEntries(t, l) {
			p := filepath.Join(dir, e.Name)
			switch e.Type {
			case tar.TypeDir:
				if err := os.MkdirAll(p, os.FileMode(e.Mode&0o777)); err != nil {
					t.Fatal(err)
				}
			case tar.TypeSymlink:
				if err := os.Symlink(e.Link, p); err != nil {
					t.Fatal(err)
				}
			case tar.TypeReg:
				if err := os.WriteFile(p, []byte(e.Data), os.FileMode(e.Mode&0o777)); err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("%s: unexpected type %q", e.Name, e.Type)
			}
		}
	}
}

// deadline polls cond until it holds or timeout passes.
func deadline(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	end := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
