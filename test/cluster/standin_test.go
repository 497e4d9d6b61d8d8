package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/simnode"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// gpuResource is the resource of NVIDIA's device plugin, and the CDI kind of its GPUs' spec: what
// the NRI plugin maps allocations to.
const gpuResource = "nvidia.com/gpu"

// standInGPU is one GPU of the stand-in CDI spec: a character device with the numbers of an NVIDIA
// GPU (major 195), which the NRI plugin's CDI policy allows at /dev/nvidia*; nothing opens it.
type standInGPU struct {
	id      string // the device plugin's ID and the CDI device name (the index strategy)
	path    string // in the container: /dev/nvidia<id>
	minor   uint32
	numbers string // major:minor in hex, as busybox stat's %t:%T prints them
}

// standInGPUs are the stand-in GPUs; nvidiactl (195:255) is the spec's common node.
var standInGPUs = []standInGPU{
	{id: "0", path: "/dev/nvidia0", minor: 0, numbers: "c3:0"},
	{id: "1", path: "/dev/nvidia1", minor: 1, numbers: "c3:1"},
}

const (
	nvidiaMajor = 195
	ctlMinor    = 255
	ctlNumbers  = "c3:ff"
)

// writeGPUSpec makes the stand-in device nodes in the simulated node's dev folder (the NRI
// plugin's --dev-root there, where its CDI policy checks a node's host path) and writes a GPU CDI
// spec of kind nvidia.com/gpu into the node's /etc/cdi (where containerd and the NRI plugin read
// specs): devices "0" and "1", /dev/nvidia<i> each, /dev/nvidiactl in the common edits. Each node
// carries its type and numbers, as `nri-gpu-plugin generate-cdi` writes them: the NRI plugin
// resolves the spec in its own container, which does not have the node's /dev, and the CDI library
// stats the host path of a node given without them. Both go at the end of the test.
func writeGPUSpec(t *testing.T, c *cluster.Cluster, n *simnode.Node) {
	t.Helper()
	dir := filepath.Join(n.Root(), "dev")
	var made []string
	mk := func(path string, minor uint32) *cdispec.DeviceNode {
		p := filepath.Join(dir, "nvidia-standin-"+filepath.Base(path)) // a /dev/nvidia* name under the dev root
		require.NoError(t, syscall.Mknod(p, syscall.S_IFCHR|0o666, int(unix.Mkdev(nvidiaMajor, minor))), "mknod %s", p)
		made = append(made, p)
		return &cdispec.DeviceNode{Path: path, HostPath: p, Type: "c", Major: nvidiaMajor, Minor: int64(minor)}
	}
	spec := cdispec.Spec{Kind: gpuResource, ContainerEdits: cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{mk("/dev/nvidiactl", ctlMinor)},
	}}
	for _, g := range standInGPUs {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: g.id, ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{mk(g.path, g.minor)},
		}})
	}
	v, err := cdispec.MinimumRequiredVersion(&spec)
	require.NoError(t, err)
	spec.Version = v
	data, err := json.MarshalIndent(spec, "", "  ")
	require.NoError(t, err)
	file := filepath.Join(c.HostPath("/etc/cdi"), "sandbox-gpu-test-nvidia.json")
	require.NoError(t, os.WriteFile(file, data, 0o644))
	t.Cleanup(func() {
		_ = os.Remove(file)
		for _, p := range made {
			_ = os.Remove(p)
		}
	})
}

// startGPUPlugin serves and registers, for the test, a plugin standing in for NVIDIA's device plugin
// where it leaves device injection to the runtime (CDI and the NRI plugin): it advertises the
// stand-in GPUs as nvidia.com/gpu and its Allocate returns nothing but records the IDs the kubelet
// allocated.
func startGPUPlugin(t *testing.T, c *cluster.Cluster) *fakePlugin {
	t.Helper()
	var ids []string
	for _, g := range standInGPUs {
		ids = append(ids, g.id)
	}
	return servePlugin(t, c.DevicePluginDir(), gpuResource, "sandbox-gpu-test-nvidia-gpu.sock", ids,
		func([]string) *pluginapi.ContainerAllocateResponse { return &pluginapi.ContainerAllocateResponse{} })
}

// allocatedGPU returns the one device of the one Allocate call so far.
func allocatedGPU(p *fakePlugin) (standInGPU, error) {
	ids, ok := p.nextAllocation()
	if !ok {
		return standInGPU{}, fmt.Errorf("the kubelet allocated no %s", gpuResource)
	}
	for _, g := range standInGPUs {
		if len(ids) == 1 && ids[0] == g.id {
			return g, nil
		}
	}
	return standInGPU{}, fmt.Errorf("allocated %v, want one of the stand-in GPUs", ids)
}
