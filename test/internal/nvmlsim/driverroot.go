package nvmlsim

import (
	"fmt"
	"os"
	"path/filepath"
)

// LibDir is the folder of the simulated driver root's libraries, as
// NVIDIA's .run installer puts them on a Debian-family host.
const LibDir = "/usr/lib/x86_64-linux-gnu"

// DriverRoot lays out a simulated driver root under dir: the simulated
// NVML (a copy of lib, the built library) as libnvidia-ml.so.<version>
// with its SONAME link, the other libraries a CUDA container needs
// (placeholders: nothing loads them here), nvidia-smi and the driver's
// other binaries (scripts that say they are simulated), and the GSP
// firmware files nvidia-ctk mounts. The files are what gpucdi and
// nvidia-ctk look for under a driver root.
func DriverRoot(dir, lib string) error {
	so, err := os.ReadFile(lib)
	if err != nil {
		return fmt.Errorf("simulated driver root %s: %w", dir, err)
	}
	libDir := filepath.Join(dir, LibDir)
	files := map[string][]byte{
		filepath.Join(libDir, "libnvidia-ml.so."+DriverVersion): so,
	}
	links := map[string]string{
		filepath.Join(libDir, "libnvidia-ml.so.1"): "libnvidia-ml.so." + DriverVersion,
	}
	for _, name := range []string{"libcuda", "libnvidia-ptxjitcompiler", "libnvidia-nvvm", "libnvidia-cfg", "libnvidia-gpucomp"} {
		files[filepath.Join(libDir, name+".so."+DriverVersion)] = []byte("simulated " + name + "\n")
		links[filepath.Join(libDir, name+".so.1")] = name + ".so." + DriverVersion
	}
	links[filepath.Join(libDir, "libcuda.so")] = "libcuda.so.1"
	for _, name := range []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"} {
		files[filepath.Join(dir, "usr/bin", name)] = []byte("#!/bin/sh\necho \"" + name + ": simulated driver " + DriverVersion + "\" >&2\nexit 1\n")
	}
	for _, fw := range []string{"gsp_ga10x.bin", "gsp_tu10x.bin"} {
		files[filepath.Join(dir, "lib/firmware/nvidia", DriverVersion, fw)] = []byte("simulated firmware\n")
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("simulated driver root: %w", err)
		}
		if err := os.WriteFile(p, b, 0o755); err != nil {
			return fmt.Errorf("simulated driver root: %w", err)
		}
	}
	for link, target := range links {
		if err := os.Symlink(target, link); err != nil {
			return fmt.Errorf("simulated driver root: %w", err)
		}
	}
	return nil
}
