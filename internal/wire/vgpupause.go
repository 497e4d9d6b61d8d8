package wire

import (
	"os"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
)

// VGPUPause is the vGPU device manager's pause file (names.VGPUPauseFile)
// at its path: it exists while the manager changes a GPU's vGPUs, and the
// KubeVirt device plugin then advertises none of them, so the kubelet
// never sees a half-built set. The empty path is no pause file: never set,
// never paused.
type VGPUPause string

// vgpuPauseText is what the pause file says to a person who looks.
const vgpuPauseText = "vGPU changes in progress\n"

// Set creates the file, never through a link or into a FIFO planted at
// the path.
func (p VGPUPause) Set() error {
	if p == "" {
		return nil
	}
	_, err := atomicfile.Write(string(p), []byte(vgpuPauseText), 0o644)
	return err
}

// Clear removes the file (a link there itself, never its target); a
// missing file is no error.
func (p VGPUPause) Clear() error {
	if p == "" {
		return nil
	}
	return atomicfile.Remove(string(p))
}

// Paused reports whether anything is at the path: a link (never followed)
// or a file of any kind pauses, so nothing planted there can hide a pause.
func (p VGPUPause) Paused() bool {
	if p == "" {
		return false
	}
	_, err := os.Lstat(string(p))
	return err == nil
}
