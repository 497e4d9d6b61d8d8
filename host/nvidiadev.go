package host

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DevNode is what the dev root shows of one device node.
type DevNode struct {
	// Path is the node under the dev root (<dev>/<name>): the host path a
	// container runtime is to open.
	Path string
	// Exists says whether anything is at Path: a node, a file, a dangling
	// link.
	Exists bool
	// Char says whether Path is a character device; Major and Minor are
	// then its numbers.
	Char         bool
	Major, Minor int64
}

// DevNode reads <dev>/<name> (name is a path inside the dev root, such as
// "nvidia0" or "nvidia-caps/nvidia-cap30"). A missing node is no error:
// Exists is false. It changes nothing.
func (h *Host) DevNode(name string) (DevNode, error) {
	if !filepath.IsLocal(name) {
		return DevNode{}, fmt.Errorf("device node %q: not a path inside the dev root %s", name, h.dev)
	}
	n := DevNode{Path: filepath.Join(h.dev, name)}
	if _, err := os.Lstat(n.Path); err != nil {
		return n, nil
	}
	n.Exists = true
	fi, err := os.Stat(n.Path)
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		return n, nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		rdev := uint64(st.Rdev) //nolint:unconvert // Rdev is uint32 on some platforms.
		n.Char, n.Major, n.Minor = true, int64(unix.Major(rdev)), int64(unix.Minor(rdev))
	}
	return n, nil
}

// CharMajors reads the character device majors of <proc>/devices by driver
// name ("nvidia-uvm": 508). A missing file gives none.
func (h *Host) CharMajors() (map[string]int64, error) {
	p := filepath.Join(h.proc, "devices")
	data, _, err := readIfExists(p)
	if err != nil {
		return nil, err
	}
	majors := map[string]int64{}
	inChar := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
		case strings.HasSuffix(line, "devices:"):
			inChar = false
		case inChar:
			num, name, ok := strings.Cut(line, " ")
			if n, err := strconv.ParseInt(num, 10, 64); ok && err == nil {
				majors[strings.TrimSpace(name)] = n
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return majors, nil
}

// MIGCaps finds the minors of /dev/nvidia-caps/nvidia-cap<N> for NVIDIA
// MIG capabilities ("gpu<minor>/gi<gi>/access",
// "gpu<minor>/gi<gi>/ci<ci>/access"), from the proc root.
type MIGCaps struct {
	proc   string
	minors map[string]int64 // mig-minors; nil when the file is missing
}

// MIGCaps reads <proc>/driver/nvidia-caps/mig-minors (as nvidia-ctk and
// go-nvlib read it). A missing file is no error: every capability is then
// looked up in its access file.
func (h *Host) MIGCaps() (*MIGCaps, error) {
	c := &MIGCaps{proc: h.proc}
	data, exists, err := readIfExists(filepath.Join(h.proc, "driver", "nvidia-caps", "mig-minors"))
	if err != nil {
		return nil, err
	}
	if !exists {
		return c, nil
	}
	c.minors = map[string]int64{}
	for line := range strings.Lines(string(data)) {
		capName, num, ok := strings.Cut(strings.TrimSpace(line), " ")
		if n, err := strconv.ParseInt(num, 10, 64); ok && err == nil {
			c.minors[capName] = n
		}
	}
	return c, nil
}

// Minor returns the minor of capability id ("gpu0/gi1/access"): from
// mig-minors, else from the DeviceFileMinor line of its access file
// (<proc>/driver/nvidia/capabilities/gpu0/mig/gi1/access, as
// libnvidia-container reads it).
func (c *MIGCaps) Minor(id string) (int64, error) {
	if n, ok := c.minors[id]; ok {
		return n, nil
	}
	gpu, rest, ok := strings.Cut(id, "/")
	if !ok || !filepath.IsLocal(id) {
		return 0, fmt.Errorf("MIG capability %q: not gpu<minor>/gi<gi>[/ci<ci>]/access", id)
	}
	p := filepath.Join(c.proc, "driver", "nvidia", "capabilities", gpu, "mig", rest)
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("MIG capability %s: not in mig-minors, and %w", id, err)
	}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "DeviceFileMinor" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("MIG capability %s: %s: %w", id, p, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("MIG capability %s: no DeviceFileMinor in %s", id, p)
}

// nvidiaMinor reads the GPU's minor from the NVIDIA driver's proc file.
func (h *Host) nvidiaMinor(a Address) (int, bool) {
	v, ok := h.nvidiaInfo(a, "Device Minor")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

// GPUMinor is the minor of the GPU's /dev/nvidia<minor>, as the NVIDIA
// driver gives it (and NVML reports it); false when the driver does not say.
func (h *Host) GPUMinor(a Address) (int, bool) { return h.nvidiaMinor(a) }

// GPUUUID is the UUID the NVIDIA driver gives the GPU at a ("GPU-..."), as
// NVIDIA's device plugin advertises it; false when the GPU is not on the
// nvidia driver (or the driver does not say).
func (h *Host) GPUUUID(a Address) (string, bool) {
	return h.nvidiaInfo(a, "GPU UUID")
}

// nvidiaInfo reads one field of <proc>/driver/nvidia/gpus/<a>/information.
func (h *Host) nvidiaInfo(a Address, field string) (string, bool) {
	p := filepath.Join(h.proc, "driver", "nvidia", "gpus", string(a), "information")
	file, err := os.Open(p)
	if err != nil {
		return "", false
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == field {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// NVIDIA's host drivers, as NVIDIADriver tells them apart.
const (
	// NVIDIADriverNone: no NVIDIA kernel driver is loaded.
	NVIDIADriverNone = "none"
	// NVIDIADriverDataCentre: NVIDIA's data-centre driver (nvidia.ko
	// without the vGPU modules): it serves CUDA containers and offers no
	// vGPU.
	NVIDIADriverDataCentre = "datacenter"
	// NVIDIADriverVGPUHost: NVIDIA's vGPU host driver (the vGPU Manager):
	// its nvidia.ko comes with nvidia_vgpu_vfio, which offers the vGPU
	// files (mdev_supported_types, a VF's nvidia/creatable_vgpu_types); it
	// serves no CUDA container.
	NVIDIADriverVGPUHost = "vgpu-host"
)

// NVIDIADriver says which of NVIDIA's host drivers the kernel runs, from
// /sys/module: nvidia_vgpu_vfio loaded is the vGPU host driver (NVIDIA's
// Virtual GPU Software User Guide verifies a vGPU Manager install by
// finding it in lsmod), nvidia alone the data-centre driver, neither none.
func (h *Host) NVIDIADriver() (string, error) {
	loaded := func(module string) (bool, error) {
		_, err := os.Stat(filepath.Join(h.sysfs, "module", module, "initstate"))
		if err == nil {
			return true, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("NVIDIA driver: %w", err)
	}
	for _, k := range []struct{ module, kind string }{{"nvidia_vgpu_vfio", NVIDIADriverVGPUHost}, {"nvidia", NVIDIADriverDataCentre}} {
		ok, err := loaded(k.module)
		if err != nil {
			return "", err
		}
		if ok {
			return k.kind, nil
		}
	}
	return NVIDIADriverNone, nil
}
