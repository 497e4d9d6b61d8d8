package gpucdi

import (
	"path/filepath"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// DefaultKind is the CDI kind of the spec unless Options.Kind says otherwise.
const DefaultKind = "nvidia.com/gpu"

// Options are the injected host paths and the kind of a spec. DevRoot and
// ProcRoot are read through package host's model; DriverRoot through
// gpucdi's own driver-root reader (driverroot.go).
type Options struct {
	DevRoot    string // default /dev
	DriverRoot string // default /
	ProcRoot   string // default /proc
	Kind       string // default DefaultKind
	// LibDirs and BinDirs are the folders, inside DriverRoot, searched for
	// driver libraries and binaries; default DefaultLibDirs() and
	// DefaultBinDirs().
	LibDirs []string
	BinDirs []string
}

// DefaultLibDirs are the folders searched for driver libraries: the
// multiarch folders of Debian-family hosts and their nvidia/current (where
// Debian's own driver packages put the libraries), and /usr/lib64 and
// /lib64 of other hosts and /usr/lib64/nvidia.
func DefaultLibDirs() []string {
	return []string{
		"/usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/nvidia/current", "/lib/x86_64-linux-gnu",
		"/usr/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu/nvidia/current", "/lib/aarch64-linux-gnu",
		"/usr/lib64", "/usr/lib64/nvidia", "/lib64",
	}
}

// ContainerLibDir is the folder of the container into which every driver
// library and every link to one is mounted a second time: nvidia/cuda
// images have it in LD_LIBRARY_PATH (and in /etc/ld.so.conf.d/nvidia.conf).
const ContainerLibDir = "/usr/local/nvidia/lib64"

// DefaultBinDirs are the folders searched for driver binaries.
func DefaultBinDirs() []string {
	return []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"}
}

// driverBinaries are the binaries mounted when present: nvidia-ctk's
// utility and compute sets.
func driverBinaries() []string {
	return []string{
		"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
		"nvidia-cuda-mps-control", "nvidia-cuda-mps-server",
	}
}

func (o Options) withDefaults() Options {
	o.DevRoot = orDefault(o.DevRoot, host.DefaultDevRoot)
	o.DriverRoot = orDefault(o.DriverRoot, "/")
	o.ProcRoot = orDefault(o.ProcRoot, host.DefaultProcRoot)
	if o.Kind == "" {
		o.Kind = DefaultKind
	}
	if o.LibDirs == nil {
		o.LibDirs = DefaultLibDirs()
	}
	if o.BinDirs == nil {
		o.BinDirs = DefaultBinDirs()
	}
	return o
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return filepath.Clean(v)
}

// Inventory is what NVML reports of a node, all a spec needs from it.
type Inventory struct {
	DriverVersion string // 550.54.15: libraries are lib*.so.<DriverVersion>
	GPUs          []GPU
}

// GPU is one GPU.
type GPU struct {
	Index int    // NVML index: the CDI device name
	Minor int    // /dev/nvidia<Minor>
	UUID  string // GPU-...: a second CDI device name
	MIG   []MIG  // the MIG devices, when MIG mode is enabled
}

// MIG is one MIG device of a GPU.
type MIG struct {
	Index int    // NVML MIG device index on its GPU: the name is <gpu>:<Index>
	UUID  string // MIG-...: a second CDI device name
	GI    int    // GPU instance ID
	CI    int    // compute instance ID
}
