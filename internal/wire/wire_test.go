package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// permitted stands for KubeVirt's PermittedHostDevices, which wire never
// links.
type permitted struct {
	PCI []struct {
		Selector string `json:"pciVendorSelector"`
		Resource string `json:"resourceName"`
	} `json:"pciHostDevices,omitempty"`
}

// runFile is one run file's writer and reader, for the tables below.
type runFile struct {
	name  string
	write func(path string) error
	read  func(path string) error
}

func runFiles() []runFile {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var p permitted
	p.PCI = append(p.PCI, struct {
		Selector string `json:"pciVendorSelector"`
		Resource string `json:"resourceName"`
	}{"10DE:2236", "nvidia.com/GA102GL_A10"})
	return []runFile{
		{names.VFIOReadyFile,
			func(path string) error {
				return WriteVFIOReady(path, &VFIOReady{Ready: true, Time: at, VFIO: []string{"0000:3b:00.0"}, Heartbeat: at, Expires: at.Add(time.Minute)})
			},
			func(path string) error { _, err := ReadVFIOReady(path); return err }},
		{names.VGPUReadyFile,
			func(path string) error {
				return WriteVGPUReady(path, VGPUReady{Config: "A10-4Q", State: VGPUStateSuccess, GPUs: []VGPUGPU{{Address: "0000:3b:00.0", VGPUs: map[string]int{"A10-4Q": 6}}}})
			},
			func(path string) error { _, err := ReadVGPUReady(path); return err }},
		{names.VGPUTypesFile,
			func(path string) error {
				return WriteVGPUTypeNames(path, VGPUTypeNames{GPUs: map[string]map[string]string{"0000:5d:00.0": {"1425": "H100-40C"}}})
			},
			func(path string) error { _, err := ReadVGPUTypeNames(path); return err }},
		{names.PermittedFile,
			func(path string) error { return WritePermitted(path, p) },
			func(path string) error { _, err := ReadPermitted[permitted](path); return err }},
	}
}

// TestRunFilesRoundTripAndWriteOnlyOnChange: what a writer wrote its
// reader reads back whole, and writing the same again leaves the file as
// it is (same inode: readers watching the folder see no event).
func TestRunFilesRoundTripAndWriteOnlyOnChange(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	dir := t.TempDir()

	vr := &VFIOReady{Ready: true, Time: at, VFIO: []string{"0000:3b:00.0"}, Actions: []VFIOMove{{Address: "0000:3b:00.0", From: "nvidia", To: "vfio-pci"}},
		Refused: []VFIORefusal{}, PID: 7, Heartbeat: at, Expires: at.Add(time.Minute),
		Split: &VFIOSplit{Declared: "1", VM: []string{"0000:3b:00.0"}, Container: []string{"0000:af:00.0"}}}
	path := filepath.Join(dir, names.VFIOReadyFile)
	require.NoError(t, WriteVFIOReady(path, vr))
	got, err := ReadVFIOReady(path)
	require.NoError(t, err)
	assert.Equal(t, vr, got)
	ok, why := got.Judge(at)
	assert.True(t, ok, why)
	assert.True(t, sameFileAfter(t, path, func() error { return WriteVFIOReady(path, vr) }), "an unchanged report is not rewritten")
	require.NoError(t, RemoveVFIOReady(path))
	assert.False(t, VFIOIsReady(path))

	gr := VGPUReady{Config: "L40S-24Q", State: VGPUStateFailed, GPUs: []VGPUGPU{{Index: 0, Address: "0000:41:00.0", Device: "10de:26b9", Backend: "vendor-vfio",
		VGPUs: map[string]int{"L40S-24Q": 2}, TypeIDs: map[string]string{"1155": "L40S-24Q"}}},
		Refused: []VGPURefusal{{GPU: 1, Address: "0000:42:00.0", Reason: "in use: qemu"}}, Error: "x"}
	path = filepath.Join(dir, names.VGPUReadyFile)
	require.NoError(t, WriteVGPUReady(path, gr))
	back, err := ReadVGPUReady(path)
	require.NoError(t, err)
	assert.Equal(t, gr, back)
	assert.True(t, sameFileAfter(t, path, func() error { return WriteVGPUReady(path, gr) }), "an unchanged report is not rewritten")

	path = filepath.Join(dir, names.PermittedFile)
	for _, f := range runFiles() {
		if f.name == names.PermittedFile {
			require.NoError(t, f.write(path))
			assert.True(t, sameFileAfter(t, path, func() error { return f.write(path) }), "unchanged permittedHostDevices are not rewritten")
		}
	}
	p, err := ReadPermitted[permitted](path)
	require.NoError(t, err)
	assert.Equal(t, "nvidia.com/GA102GL_A10", p.PCI[0].Resource)
}

func sameFileAfter(t *testing.T, path string, write func() error) bool {
	t.Helper()
	before, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, write())
	after, err := os.Stat(path)
	require.NoError(t, err)
	return os.SameFile(before, after)
}

// TestVGPUReadyKeepsItsKeys: the report's JSON has the keys the validator,
// the KubeVirt plugin and outside readers know, and no refusal is [] in
// the file.
func TestVGPUReadyKeepsItsKeys(t *testing.T) {
	r := VGPUReady{Config: "A10-4Q", State: VGPUStateSuccess, GPUs: []VGPUGPU{{Index: 1, Address: "0000:3b:00.0", Device: "10de:2236", Backend: "mdev",
		VGPUs: map[string]int{"A10-4Q": 6}, TypeIDs: map[string]string{"558": "A10-4Q"}}}, Error: "e", Release: true}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	assert.JSONEq(t, `{"config":"A10-4Q","state":"success","gpus":[{"index":1,"address":"0000:3b:00.0","device":"10de:2236","backend":"mdev",`+
		`"vgpus":{"A10-4Q":6},"typeIds":{"558":"A10-4Q"}}],"refused":null,"error":"e","release":true}`, string(b))
	path := filepath.Join(t.TempDir(), names.VGPUReadyFile)
	require.NoError(t, WriteVGPUReady(path, VGPUReady{Config: "c", State: VGPUStateSuccess, GPUs: []VGPUGPU{}}))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.JSONEq(t, `{"config":"c","state":"success","gpus":[],"refused":[]}`, string(b))
	assert.True(t, bytes.HasSuffix(b, []byte("}\n")), "indented, with a final newline")
}

// TestRunFileReadersRefuseLinksFIFOsAndHugeFiles: every reader fails at
// once, naming the path, on a FIFO (nobody on its other end), on a link to
// a good file (never read through) and on a file over atomicfile.MaxSize;
// every writer replaces a link or a FIFO at its path, never writing
// through it or blocking.
func TestRunFileReadersRefuseLinksFIFOsAndHugeFiles(t *testing.T) {
	for _, f := range runFiles() {
		t.Run(f.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, f.name)
			outside := filepath.Join(t.TempDir(), f.name)
			require.NoError(t, f.write(outside))
			require.NoError(t, f.read(outside), "the good file reads")
			good, err := os.ReadFile(outside)
			require.NoError(t, err)

			require.NoError(t, os.Symlink(outside, path))
			err = f.read(path)
			require.ErrorContains(t, err, path)
			assert.ErrorContains(t, err, "symbolic link")
			require.NoError(t, f.write(path))
			fi, err := os.Lstat(path)
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "the writer replaced the link")
			after, err := os.ReadFile(outside)
			require.NoError(t, err)
			assert.Equal(t, good, after, "the link's target is untouched")

			require.NoError(t, os.Remove(path))
			require.NoError(t, syscall.Mkfifo(path, 0o644))
			done := make(chan error, 2)
			go func() { done <- f.read(path) }()
			go func() { done <- f.write(path) }()
			for range 2 {
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatal("a reader or writer blocked on a FIFO")
				}
			}
			fi, err = os.Lstat(path)
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular(), "the writer replaced the FIFO")

			require.NoError(t, os.WriteFile(path, append(good, bytes.Repeat([]byte(" "), atomicfile.MaxSize)...), 0o644))
			err = f.read(path)
			require.ErrorContains(t, err, path)
			assert.ErrorContains(t, err, "over the")

			require.NoError(t, os.WriteFile(path, []byte("{garbage"), 0o644))
			assert.ErrorContains(t, f.read(path), path, "bad JSON names the file")
		})
	}
}

// TestVGPUPause: anything at the path pauses (a dangling link too, never
// followed); Set replaces a planted link or FIFO without blocking or
// writing its target; Clear removes the link itself; no path is never
// paused and costs nothing.
func TestVGPUPause(t *testing.T) {
	dir := t.TempDir()
	p := VGPUPause(filepath.Join(dir, names.VGPUPauseFile))
	assert.False(t, p.Paused())
	require.NoError(t, p.Set())
	assert.True(t, p.Paused())
	require.NoError(t, p.Clear())
	assert.False(t, p.Paused())
	require.NoError(t, p.Clear(), "clearing twice is no error")

	require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "missing"), string(p)))
	assert.True(t, p.Paused(), "a dangling link pauses: something is there")
	target := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.WriteFile(target, []byte("keep"), 0o644))
	require.NoError(t, os.Remove(string(p)))
	require.NoError(t, os.Symlink(target, string(p)))
	require.NoError(t, p.Clear())
	_, err := os.Lstat(string(p))
	assert.ErrorIs(t, err, os.ErrNotExist)
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b), "Clear unlinks the link, never its target")

	require.NoError(t, syscall.Mkfifo(string(p), 0o644))
	done := make(chan error, 1)
	go func() { done <- p.Set() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Set blocked on a FIFO")
	}
	fi, err := os.Lstat(string(p))
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())

	var none VGPUPause
	assert.False(t, none.Paused())
	require.NoError(t, none.Set())
	require.NoError(t, none.Clear())
}
