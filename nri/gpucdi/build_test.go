package gpucdi

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

func twoGPUs() Inventory {
	return Inventory{DriverVersion: testVersion, GPUs: []GPU{
		{Index: 0, Minor: 0, UUID: "GPU-aaaa"},
		{Index: 1, Minor: 3, UUID: "GPU-bbbb"},
	}}
}

// buildTwo builds twoGPUs' spec with o, requiring no error.
func buildTwo(t *testing.T, o Options) *cdispec.Spec {
	t.Helper()
	spec, err := Build(twoGPUs(), o)
	require.NoError(t, err)
	return spec
}

func TestBuildGPUsByIndexAndUUID(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	spec := buildTwo(t, h.opts())

	assert.Equal(t, DefaultKind, spec.Kind)
	assert.Equal(t, []string{"0", "GPU-aaaa", "1", "GPU-bbbb", "all"}, deviceNames(spec))
	gpu1 := []string{"/dev/nvidia3 " + filepath.Join(h.dev, "nvidia3") + " c 195:3"}
	assert.Equal(t, gpu1, nodeSummary(device(t, spec, "1").ContainerEdits.DeviceNodes), "node by minor, not index")
	assert.Equal(t, gpu1, nodeSummary(device(t, spec, "GPU-bbbb").ContainerEdits.DeviceNodes))
	assert.Equal(t, []string{
		"/dev/nvidia0 " + filepath.Join(h.dev, "nvidia0") + " c 195:0",
		"/dev/nvidia3 " + filepath.Join(h.dev, "nvidia3") + " c 195:3",
	}, nodeSummary(device(t, spec, "all").ContainerEdits.DeviceNodes))

	assert.Equal(t, []string{"NVIDIA_VISIBLE_DEVICES=void"}, spec.ContainerEdits.Env)
	assert.Empty(t, spec.ContainerEdits.Hooks, "no hooks: they fail in user namespaces")
	for _, d := range spec.Devices {
		assert.Empty(t, d.ContainerEdits.Hooks, d.Name)
	}
	want, err := cdispec.MinimumRequiredVersion(spec)
	require.NoError(t, err)
	assert.Equal(t, want, spec.Version)
	require.NoError(t, Validate(spec))
}

func TestBuildKindAndEmptyUUID(t *testing.T) {
	h := newFakeHost(t, 0)
	o := h.opts()
	o.Kind = "example.com/gpu"
	spec, err := Build(Inventory{DriverVersion: testVersion, GPUs: []GPU{{Index: 0}}}, o)
	require.NoError(t, err)
	assert.Equal(t, "example.com/gpu", spec.Kind)
	assert.Equal(t, []string{"0", "all"}, deviceNames(spec))

	o.Kind = "not a kind"
	_, err = Build(twoGPUs(), o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a kind")
}

func TestBuildNoGPUs(t *testing.T) {
	h := newFakeHost(t)
	_, err := Build(Inventory{DriverVersion: testVersion}, h.opts())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no devices")
}

func TestBuildControlNodes(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	node := func(name, numbers string) string {
		return "/dev/" + name + " " + filepath.Join(h.dev, name) + " " + numbers
	}
	// No control node exists yet (nvidia-uvm's are made on first CUDA use):
	// nvidiactl always, uvm's because <proc>/devices lists nvidia-uvm.
	spec := buildTwo(t, h.opts())
	assert.Equal(t, []string{
		node("nvidiactl", "c 195:255"),
		node("nvidia-uvm", "c 508:0"),
		node("nvidia-uvm-tools", "c 508:1"),
	}, nodeSummary(spec.ContainerEdits.DeviceNodes), "uvm's major from the character section of <proc>/devices")

	h.link(h.dev, "nvidia-modeset", "nowhere") // present, even dangling
	spec = buildTwo(t, h.opts())
	assert.Equal(t, []string{
		node("nvidiactl", "c 195:255"),
		node("nvidia-uvm", "c 508:0"),
		node("nvidia-uvm-tools", "c 508:1"),
		node("nvidia-modeset", "c 195:254"),
	}, nodeSummary(spec.ContainerEdits.DeviceNodes), "nvidia-modeset only when present")

	// nvidia-uvm not loaded: no uvm nodes, unless they exist.
	h.write(h.proc, "devices", "Character devices:\n195 nvidia-frontend\n")
	spec = buildTwo(t, h.opts())
	assert.Equal(t, []string{
		node("nvidiactl", "c 195:255"),
		node("nvidia-modeset", "c 195:254"),
	}, nodeSummary(spec.ContainerEdits.DeviceNodes))
	h.file(h.dev, "nvidia-uvm")
	spec = buildTwo(t, h.opts())
	assert.Equal(t, []string{
		node("nvidiactl", "c 195:255"),
		node("nvidia-uvm", " 0:0"),
		node("nvidia-modeset", "c 195:254"),
	}, nodeSummary(spec.ContainerEdits.DeviceNodes), "an unknown major is left to the runtime")
}

func migInventory() Inventory {
	inv := twoGPUs()
	inv.GPUs[1].MIG = []MIG{
		{Index: 0, UUID: "MIG-1111", GI: 1, CI: 0},
		{Index: 2, UUID: "MIG-2222", GI: 2, CI: 0},
	}
	return inv
}

func TestBuildMIGDevices(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	// gpu<minor>: GPU 1 has minor 3.
	h.write(h.proc, "driver/nvidia-caps/mig-minors", "config 1\nmonitor 2\ngpu3/gi1/access 30\ngpu3/gi1/ci0/access 31\ngpu1/gi2/access 99\n")
	h.write(h.proc, "driver/nvidia/capabilities/gpu3/mig/gi2/access", "DeviceFileMinor: 39\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
	h.write(h.proc, "driver/nvidia/capabilities/gpu3/mig/gi2/ci0/access", "DeviceFileMinor: 40\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
	spec, err := Build(migInventory(), h.opts())
	require.NoError(t, err)

	assert.Equal(t, []string{"0", "GPU-aaaa", "1", "GPU-bbbb", "1:0", "MIG-1111", "1:2", "MIG-2222", "all"}, deviceNames(spec))
	caps := filepath.Join(h.dev, "nvidia-caps")
	parent := "/dev/nvidia3 " + filepath.Join(h.dev, "nvidia3") + " c 195:3"
	mig10 := []string{parent,
		"/dev/nvidia-caps/nvidia-cap30 " + filepath.Join(caps, "nvidia-cap30") + " c 237:30",
		"/dev/nvidia-caps/nvidia-cap31 " + filepath.Join(caps, "nvidia-cap31") + " c 237:31",
	}
	assert.Equal(t, mig10, nodeSummary(device(t, spec, "1:0").ContainerEdits.DeviceNodes), "from mig-minors")
	assert.Equal(t, mig10, nodeSummary(device(t, spec, "MIG-1111").ContainerEdits.DeviceNodes))
	assert.Equal(t, []string{parent,
		"/dev/nvidia-caps/nvidia-cap39 " + filepath.Join(caps, "nvidia-cap39") + " c 237:39",
		"/dev/nvidia-caps/nvidia-cap40 " + filepath.Join(caps, "nvidia-cap40") + " c 237:40",
	}, nodeSummary(device(t, spec, "1:2").ContainerEdits.DeviceNodes), "from the access files")
	assert.Len(t, device(t, spec, "all").ContainerEdits.DeviceNodes, 6, "both GPUs and four caps, each once")
}

func TestBuildMIGCapMissing(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	h.write(h.proc, "driver/nvidia-caps/mig-minors", "gpu3/gi1/access 30\ngpu3/gi1/ci0/access 31\n")
	_, err := Build(migInventory(), h.opts())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MIG device 1:2 (MIG-2222)")
	assert.Contains(t, err.Error(), "gpu3/gi2/access")

	h.write(h.proc, "driver/nvidia/capabilities/gpu3/mig/gi2/access", "DeviceFileMode: 292\n")
	_, err = Build(migInventory(), h.opts())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no DeviceFileMinor")
}

func TestBuildPreR470MIGUUIDIsNotAName(t *testing.T) {
	h := newFakeHost(t, 0, 3)
	h.write(h.proc, "driver/nvidia-caps/mig-minors", "gpu3/gi1/access 30\ngpu3/gi1/ci0/access 31\n")
	inv := twoGPUs()
	inv.GPUs[1].MIG = []MIG{{Index: 0, UUID: "MIG-GPU-bbbb/1/0", GI: 1, CI: 0}}
	spec, err := Build(inv, h.opts())
	require.NoError(t, err)
	assert.Equal(t, []string{"0", "GPU-aaaa", "1", "GPU-bbbb", "1:0", "all"}, deviceNames(spec))
}

func TestDevNodeNumbersFromACharacterDevice(t *testing.T) {
	h := newBareHost(t)
	h.link(h.dev, "nvidia7", "/dev/null")
	m := hostModel(h.opts())
	n, err := devNode(m, "nvidia7", nvidiaMajor, 7)
	require.NoError(t, err)
	assert.Equal(t, []string{"/dev/nvidia7 " + filepath.Join(h.dev, "nvidia7") + " c 1:3"},
		nodeSummary([]*cdispec.DeviceNode{n}), "the node's own numbers win")
	n, err = devNode(m, "no-such-node", 0, 7)
	require.NoError(t, err)
	assert.Equal(t, []string{"/dev/no-such-node " + filepath.Join(h.dev, "no-such-node") + "  0:0"},
		nodeSummary([]*cdispec.DeviceNode{n}))
	_, err = devNode(m, "../etc/passwd", 0, 7)
	require.Error(t, err, "a name outside the dev root")
	assert.Contains(t, err.Error(), "CDI device node /dev/../etc/passwd")
}

// Build reads /dev and /proc only through the host model: a fake one
// decides every node's numbers, and its errors reach the caller.
func TestBuildReadsDevicesThroughTheHostModel(t *testing.T) {
	h := newFakeHost(t, 0)
	o := h.opts().withDefaults()
	fake := fakeDevices{majors: map[string]int64{"nvidia-uvm": 500}, nodes: map[string]host.DevNode{
		"nvidia0": {Path: "/elsewhere/nvidia0", Exists: true, Char: true, Major: 195, Minor: 9},
	}}
	spec, err := build(Inventory{DriverVersion: testVersion, GPUs: []GPU{{}}}, o, fake)
	require.NoError(t, err)
	assert.Equal(t, []string{"/dev/nvidia0 /elsewhere/nvidia0 c 195:9"}, nodeSummary(device(t, spec, "0").ContainerEdits.DeviceNodes))
	assert.Equal(t, []string{
		"/dev/nvidiactl /elsewhere/nvidiactl c 195:255",
		"/dev/nvidia-uvm /elsewhere/nvidia-uvm c 500:0",
		"/dev/nvidia-uvm-tools /elsewhere/nvidia-uvm-tools c 500:1",
	}, nodeSummary(spec.ContainerEdits.DeviceNodes))

	fake.err = errors.New("read /x/devices: boom")
	_, err = build(Inventory{DriverVersion: testVersion, GPUs: []GPU{{}}}, o, fake)
	require.ErrorIs(t, err, fake.err)
}

type fakeDevices struct {
	majors map[string]int64
	nodes  map[string]host.DevNode
	err    error
}

func (f fakeDevices) DevNode(name string) (host.DevNode, error) {
	if n, ok := f.nodes[name]; ok {
		return n, nil
	}
	return host.DevNode{Path: "/elsewhere/" + name}, nil
}

func (f fakeDevices) CharMajors() (map[string]int64, error) { return f.majors, f.err }

func (f fakeDevices) MIGCaps() (*host.MIGCaps, error) { return nil, f.err }
