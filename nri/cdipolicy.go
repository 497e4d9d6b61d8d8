package nri

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Policy is what a GPU CDI spec may bring into a container, checked on
// every spec the plugin injects (the spec's own edits and the device's)
// before anything is adjusted. A spec planted in a CDI folder by another
// writer on the node (or an edited one) must not turn a GPU pod into a way
// onto the host: everything outside the rules below refuses the container,
// with a message naming the spec file and the entry.
//
//   - hooks: the hook policy (HooksNVIDIA, HooksNone, HooksAny);
//   - mounts: bind mounts of the driver's files under a driver root
//     (DriverFile), read-only (options carry "ro"); NVIDIA's IPC sockets
//     and the MPS pipe folder (IPCPaths) may be read-write as NVIDIA's
//     generator writes them. Only known mount options; no other mount type;
//     never the root itself; container paths absolute and clean, never /;
//   - device nodes: character devices at /dev/nvidia*, /dev/dri/* or
//     /dev/vfio/*, from the same paths under the host's /dev (DevRoot) or
//     a driver root's dev folder, with the majors of NVIDIA's
//     drivers (195 and the nvidia* entries of /proc/devices), DRM (226) or
//     VFIO (its /proc/devices major; /dev/vfio/vfio is 10:196);
//   - env: only what NVIDIA's generator sets (checkEnv:
//     NVIDIA_VISIBLE_DEVICES=void, NVIDIA_CTK_LIBCUDA_DIR=<folder>,
//     NVCT_EMPTY_DEVICE=), never LD_PRELOAD and the like;
//   - no additional group 0, no network devices, no Intel RDT settings.
type Policy struct {
	// Hooks is HooksNVIDIA (default), HooksNone or HooksAny.
	Hooks string
	// DriverRoots are where the driver's files are on the host (default
	// DefaultDriverRoots).
	DriverRoots []string
	// DevRoot is where the host's /dev is, as the spec's host paths name
	// it (the --dev-root host root; default /dev).
	DevRoot string
	// CharMajors, when set, gives the host's character device majors by
	// name (host.CharMajors over /proc/devices); without it only the fixed
	// majors count.
	CharMajors func() (map[string]int64, error)
}

// DefaultDriverRoots are a driver installed on the host and the GPU
// Operator's containerized driver.
var DefaultDriverRoots = []string{"/", "/run/nvidia/driver"}

// IPCPaths are NVIDIA's IPC endpoints, relative to a driver root, that its
// generator mounts without "ro" (a socket is reached whether its mount is
// read-only or not).
var IPCPaths = []string{
	"/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket",
	"/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket",
	"/tmp/nvidia-mps",
}

// errSpecRefused refuses a container whose GPU spec brings what the policy
// does not allow.
var errSpecRefused = errors.New("a GPU CDI spec brings what the CDI policy does not allow (a spec planted by another CDI writer?)")

func (p *Policy) hooks() string {
	if p.Hooks == "" {
		return HooksNVIDIA
	}
	return p.Hooks
}

func (p *Policy) driverRoots() []string {
	if len(p.DriverRoots) == 0 {
		return DefaultDriverRoots
	}
	return p.DriverRoots
}

// violation is one entry of a spec the policy refuses.
type violation struct {
	file, entry string
	err         error
}

func (v violation) String() string { return fmt.Sprintf("%s: %s: %v", v.file, v.entry, v.err) }

// majors is the lazily read set of allowed dynamic majors.
type majors struct {
	p      *Policy
	loaded bool
	m      map[string]int64
	err    error
}

func (m *majors) get() (map[string]int64, error) {
	if !m.loaded {
		m.loaded = true
		if m.p.CharMajors != nil {
			m.m, m.err = m.p.CharMajors()
		}
	}
	return m.m, m.err
}

// checkEdits returns the entries of one set of container edits (a spec's
// or a device's; where names it) that the policy refuses.
func (p *Policy) checkEdits(e *cdispec.ContainerEdits, file, where string, mj *majors) []violation {
	var out []violation
	bad := func(entry string, err error) {
		out = append(out, violation{file: file, entry: where + "." + entry, err: err})
	}
	for i, kv := range e.Env {
		if err := checkEnv(kv); err != nil {
			bad(fmt.Sprintf("env[%d]", i), err)
		}
	}
	for i, h := range e.Hooks {
		if err := p.checkHook(h); err != nil {
			bad(fmt.Sprintf("hooks[%d]", i), err)
		}
	}
	for i, m := range e.Mounts {
		if err := p.checkMount(m); err != nil {
			bad(fmt.Sprintf("mounts[%d]", i), err)
		}
	}
	for i, d := range e.DeviceNodes {
		if err := p.checkNode(d, mj); err != nil {
			bad(fmt.Sprintf("deviceNodes[%d]", i), err)
		}
	}
	for i, g := range e.AdditionalGIDs {
		if g == 0 {
			bad(fmt.Sprintf("additionalGids[%d]", i), errors.New("group 0 (root)"))
		}
	}
	if len(e.NetDevices) > 0 {
		bad("netDevices", fmt.Errorf("%d network devices: a GPU spec moves no host interface", len(e.NetDevices)))
	}
	if e.IntelRdt != nil {
		bad("intelRdt", errors.New("a GPU spec sets no Intel RDT class"))
	}
	return out
}

// checkEnv allows the env NVIDIA's generator puts in a spec: the void
// device request (so that no legacy NVIDIA hook adds GPUs), the folder of
// libcuda, and the filler of an empty device.
func checkEnv(kv string) error {
	k, v, _ := strings.Cut(kv, "=")
	switch {
	case k == VisibleDevicesEnv && v == "void", k == "NVCT_EMPTY_DEVICE" && v == "",
		k == "NVIDIA_CTK_LIBCUDA_DIR" && cleanAbs(v):
		return nil
	}
	return fmt.Errorf("%q: only NVIDIA_VISIBLE_DEVICES=void, NVIDIA_CTK_LIBCUDA_DIR=<folder> and NVCT_EMPTY_DEVICE= allowed", kv)
}

// mountOptions are the options a GPU spec's mount may carry.
var mountOptions = []string{"ro", "rro", "bind", "rbind", "nosuid", "nodev", "noexec",
	"private", "rprivate", "slave", "rslave", "noatime", "relatime", "nodiratime", "strictatime"}

func (p *Policy) checkMount(m *cdispec.Mount) error {
	desc := fmt.Sprintf("%q -> %q", m.HostPath, m.ContainerPath)
	if m.Type != "" && m.Type != "bind" {
		return fmt.Errorf("%s: type %q: only bind mounts", desc, m.Type)
	}
	if !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") && m.Type != "bind" {
		return fmt.Errorf("%s: not a bind mount (options %q)", desc, m.Options)
	}
	for _, o := range m.Options {
		if !slices.Contains(mountOptions, o) {
			return fmt.Errorf("%s: option %q not allowed", desc, o)
		}
	}
	if !cleanAbs(m.ContainerPath) || m.ContainerPath == "/" {
		return fmt.Errorf("%s: container path: want an absolute, clean path other than /", desc)
	}
	rel, ok := p.underDriverRoot(m.HostPath)
	if !ok {
		return fmt.Errorf("%s: host path not under a driver root (%s), or a root itself", desc, strings.Join(p.driverRoots(), ", "))
	}
	readOnly := slices.Contains(m.Options, "ro") || slices.Contains(m.Options, "rro")
	if slices.Contains(IPCPaths, rel) {
		return nil
	}
	if !DriverFile(rel) {
		return fmt.Errorf("%s: host path is not one of the driver's files (%s under its driver root)", desc, rel)
	}
	if !readOnly {
		return fmt.Errorf("%s: read-write (options %q lack \"ro\")", desc, m.Options)
	}
	return nil
}

// underDriverRoot returns the host path relative to the driver root it is
// under ("/usr/lib/x.so"), never for a root itself.
func (p *Policy) underDriverRoot(host string) (string, bool) {
	if !cleanAbs(host) {
		return "", false
	}
	best := ""
	for _, r := range p.driverRoots() {
		if !cleanAbs(r) {
			continue
		}
		if r == "/" {
			best = host
			continue
		}
		if strings.HasPrefix(host, r+"/") {
			return strings.TrimPrefix(host, r), true
		}
	}
	return best, best != "" && best != "/"
}

// driverDirs are the folders (relative to a driver root) where the
// driver's files are: libraries, binaries, firmware, and the config and
// data files of its graphics and compute parts.
var driverDirs = []string{"/usr/lib", "/usr/lib32", "/usr/lib64", "/lib", "/lib32", "/lib64",
	"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/share", "/etc/vulkan", "/etc/OpenCL", "/etc/X11", "/etc/nvidia"}

// DriverFile reports whether a path relative to a driver root is one of
// the driver's files: under one of the driver's folders (driverDirs), with
// a driver name at or below the folder: a part containing "nvidia", or a
// name starting with libcuda or libnv (libcuda.so.1, libnvcuvid.so,
// lib/firmware/nvidia/580.65.06/gsp_ga10x.bin,
// usr/share/glvnd/egl_vendor.d/10_nvidia.json).
func DriverFile(rel string) bool {
	if !cleanAbs(rel) {
		return false
	}
	for _, dir := range driverDirs {
		rest, ok := strings.CutPrefix(rel, dir+"/")
		if !ok {
			continue
		}
		for _, part := range strings.Split(rest, "/") {
			if strings.Contains(strings.ToLower(part), "nvidia") || strings.HasPrefix(part, "libcuda") || strings.HasPrefix(part, "libnv") {
				return true
			}
		}
	}
	return false
}

const (
	nvidiaMajor = 195
	drmMajor    = 226
	miscMajor   = 10
	vfioMinor   = 196 // /dev/vfio/vfio
)

func (p *Policy) checkNode(d *cdispec.DeviceNode, mj *majors) error {
	desc := d.Path
	if d.HostPath != "" && d.HostPath != d.Path {
		desc = fmt.Sprintf("%s (host %s)", d.Path, d.HostPath)
	}
	class := gpuNodeClass(d.Path)
	if class == "" {
		return fmt.Errorf("device node %s: only /dev/nvidia*, /dev/dri/* and /dev/vfio/*", desc)
	}
	if d.HostPath != "" && !slices.ContainsFunc(p.devRoots(), func(root string) bool {
		return gpuNodeClass(containerDevPath(root, d.HostPath)) == class
	}) {
		return fmt.Errorf("device node %s: host path is not a node of the same kind under %s", desc, strings.Join(p.devRoots(), " or "))
	}
	if d.Type != "" && d.Type != "c" {
		return fmt.Errorf("device node %s: type %q: only character devices", desc, d.Type)
	}
	if d.Major == 0 && d.Minor == 0 {
		return nil // taken from the host node, whose path is checked above
	}
	ok, err := p.majorAllowed(class, d.Major, d.Minor, mj)
	if err != nil {
		return fmt.Errorf("device node %s: %w", desc, err)
	}
	if !ok {
		return fmt.Errorf("device node %s: %d:%d is not a device of NVIDIA's drivers, DRM or VFIO", desc, d.Major, d.Minor)
	}
	return nil
}

func (p *Policy) devRoot() string {
	if p.DevRoot == "" {
		return "/dev"
	}
	return path.Clean(p.DevRoot)
}

// devRoots are where a node's host path may lie: the dev root, and the dev
// folder of each driver root other than / (a containerized driver's nodes,
// as nvidia-ctk names them with its --dev-root there).
func (p *Policy) devRoots() []string {
	out := []string{p.devRoot()}
	for _, r := range p.driverRoots() {
		if d := path.Join(r, "dev"); cleanAbs(r) && r != "/" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// containerDevPath is the /dev path of a host path under a dev root, ""
// for one elsewhere.
func containerDevPath(root, host string) string {
	rest, ok := strings.CutPrefix(host, root+"/")
	if !ok || !cleanAbs(host) {
		return ""
	}
	return "/dev/" + rest
}

// gpuNodeClass is "nvidia", "dri", "vfio" (or "vfio-container" for
// /dev/vfio/vfio) for the paths a GPU spec may bring, else "".
func gpuNodeClass(p string) string {
	switch {
	case !cleanAbs(p):
		return ""
	case strings.HasPrefix(p, "/dev/nvidia"):
		return "nvidia"
	case strings.HasPrefix(p, "/dev/dri/"):
		return "dri"
	case p == "/dev/vfio/vfio":
		return "vfio-container"
	case strings.HasPrefix(p, "/dev/vfio/"):
		return "vfio"
	}
	return ""
}

func (p *Policy) majorAllowed(class string, major, minor int64, mj *majors) (bool, error) {
	switch class {
	case "vfio-container":
		return major == miscMajor && minor == vfioMinor, nil
	case "dri":
		return major == drmMajor, nil
	case "nvidia":
		if major == nvidiaMajor {
			return true, nil
		}
	}
	m, err := mj.get()
	if err != nil {
		return false, fmt.Errorf("host device majors: %w", err)
	}
	for name, n := range m {
		if n != major {
			continue
		}
		if class == "nvidia" && strings.HasPrefix(name, "nvidia") || class == "vfio" && name == "vfio" {
			return true, nil
		}
	}
	return false, nil
}

func cleanAbs(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && !strings.ContainsRune(p, 0)
}
