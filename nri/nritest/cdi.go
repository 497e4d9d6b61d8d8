package nritest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// GPUUUID is the UUID of stand-in GPU i.
func GPUUUID(i int) string { return fmt.Sprintf("GPU-00000000-0000-0000-0000-00000000000%d", i) }

// MIGUUID is the UUID of the stand-in MIG device on GPU 0.
const MIGUUID = "MIG-11111111-2222-3333-4444-555555555555"

// GPUSpec is a CDI spec shaped like nvidia-ctk's: GPUs by index and UUID
// (/dev/nvidia<i>, major 195), a MIG device on GPU 0, and common edits
// (/dev/nvidiactl, a driver library mount, env). With hooks, it carries a
// createContainer hook as nvidia-ctk's does.
func GPUSpec(n int, hooks bool) *specs.Spec {
	node := func(path string, minor int64) *specs.DeviceNode {
		return &specs.DeviceNode{Path: path, Type: "c", Major: 195, Minor: minor}
	}
	s := &specs.Spec{Version: "0.6.0", Kind: "nvidia.com/gpu"}
	for i := 0; i < n; i++ {
		edits := specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{node(fmt.Sprintf("/dev/nvidia%d", i), int64(i))}}
		s.Devices = append(s.Devices,
			specs.Device{Name: fmt.Sprint(i), ContainerEdits: edits},
			specs.Device{Name: GPUUUID(i), ContainerEdits: edits})
	}
	s.Devices = append(s.Devices, specs.Device{Name: MIGUUID, ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{
		node("/dev/nvidia0", 0), {Path: "/dev/nvidia-caps/nvidia-cap12", Type: "c", Major: 508, Minor: 12}}}})
	s.ContainerEdits = specs.ContainerEdits{
		DeviceNodes: []*specs.DeviceNode{node("/dev/nvidiactl", 255)},
		Env:         []string{"NVIDIA_VISIBLE_DEVICES=void"},
		Mounts:      []*specs.Mount{{HostPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", ContainerPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", Options: []string{"ro", "nosuid", "nodev", "bind"}}},
	}
	if hooks {
		s.ContainerEdits.Hooks = []*specs.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"}}}
	}
	return s
}

// CharMajors is the /proc/devices of the host GPUSpec describes, as
// host.CharMajors reads it (nvidia-caps at 508, the MIG node's major).
func CharMajors() (map[string]int64, error) {
	return map[string]int64{"mem": 1, "nvidia-frontend": 195, "nvidia-caps": 508, "nvidia-uvm": 507, "vfio": 239}, nil
}

// WriteSpec writes the spec into dir as name.yaml, atomically.
func WriteSpec(tb testing.TB, dir, name string, s *specs.Spec) string {
	tb.Helper()
	b, err := yaml.Marshal(s)
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p+".tmp", b, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		tb.Fatal(err)
	}
	return p
}
