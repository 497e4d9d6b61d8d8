package containerd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	cdiKind = "nvidia.com/gpu" // the CDI kind, and the resource name the kubelet allocates
	// commonEnv is set by the spec's common containerEdits: injected with any of its devices. It is
	// one of the variables NVIDIA's generator writes, which the plugin's CDI policy allows.
	commonEnv      = "NVIDIA_CTK_LIBCUDA_DIR"
	commonEnvValue = "/usr/lib/sandbox-gpu-standin"
	ctlPath        = "/dev/nvidiactl"
)

// standIn is one stand-in GPU: a character device made with the numbers of a harmless host device.
type standIn struct {
	index    string // the CDI device name "0", "1", "2" (the nvidia device plugin's index strategy)
	uuid     string // its second CDI device name (the uuid strategy, the default of the device plugin)
	path     string // inside the container: /dev/nvidia<index>
	hostPath string // the node made in the test's folder
	numbers  string // major:minor
}

// gpuSpec is the CDI spec the suite writes for its stand-in GPUs.
type gpuSpec struct {
	file       string
	gpus       []standIn
	ctlHost    string // the /dev/nvidiactl stand-in
	ctlNumbers string
}

// byIndex returns the stand-in GPU named i.
func (s gpuSpec) byIndex(t *testing.T, i string) standIn {
	t.Helper()
	for _, g := range s.gpus {
		if g.index == i {
			return g
		}
	}
	t.Fatalf("no stand-in GPU %q", i)
	return standIn{}
}

// want is the /dev/nvidia* nodes a container given the GPUs gs must see: theirs and nvidiactl.
func (s gpuSpec) want(gs ...standIn) map[string]string {
	out := map[string]string{}
	if len(gs) > 0 {
		out[ctlPath] = s.ctlNumbers
	}
	for _, g := range gs {
		out[g.path] = g.numbers
	}
	return out
}

// writeCDISpec makes the stand-in device nodes in the daemon's dev folder and writes the CDI spec of
// kind nvidia.com/gpu into its CDI folder: devices "0", "1", "2", the same three under GPU UUIDs, and
// "all" (as nvidia-ctk generates them), /dev/nvidia<i> each, with /dev/nvidiactl and an env variable
// as common edits. The stand-ins of nvidia0, nvidia1, nvidia2 and nvidiactl have the numbers of
// /dev/null, /dev/zero, /dev/full and /dev/random, which every container's device cgroup allows.
func writeCDISpec(t *testing.T, d *daemon) gpuSpec {
	t.Helper()
	mk := func(name, like string) (string, string) {
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat(like, &st), "stat %s", like)
		p := d.path("dev", name)
		require.NoError(t, syscall.Mknod(p, syscall.S_IFCHR|0o666, int(st.Rdev)), "mknod %s", p)
		return p, fmt.Sprintf("%d:%d", major(st.Rdev), minor(st.Rdev))
	}
	var s gpuSpec
	s.ctlHost, s.ctlNumbers = mk("nvidiactl", "/dev/random")
	spec := cdispec.Spec{
		Kind: cdiKind,
		ContainerEdits: cdispec.ContainerEdits{
			Env:         []string{commonEnv + "=" + commonEnvValue},
			DeviceNodes: []*cdispec.DeviceNode{{Path: ctlPath, HostPath: s.ctlHost}},
		},
	}
	var all cdispec.ContainerEdits
	for i, like := range []string{"/dev/null", "/dev/zero", "/dev/full"} {
		g := standIn{
			index: fmt.Sprint(i),
			uuid:  fmt.Sprintf("GPU-5a6d0f3e-0000-4000-8000-%012d", i),
			path:  fmt.Sprintf("/dev/nvidia%d", i),
		}
		g.hostPath, g.numbers = mk(fmt.Sprintf("nvidia%d", i), like)
		s.gpus = append(s.gpus, g)
		node := func() *cdispec.DeviceNode { return &cdispec.DeviceNode{Path: g.path, HostPath: g.hostPath} }
		for _, name := range []string{g.index, g.uuid} {
			spec.Devices = append(spec.Devices, cdispec.Device{
				Name: name, ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{node()}},
			})
		}
		all.DeviceNodes = append(all.DeviceNodes, node())
	}
	spec.Devices = append(spec.Devices, cdispec.Device{Name: "all", ContainerEdits: all})
	v, err := cdispec.MinimumRequiredVersion(&spec)
	require.NoError(t, err)
	spec.Version = v
	data, err := json.MarshalIndent(spec, "", "  ")
	require.NoError(t, err)
	s.file = filepath.Join(d.cdiDir(), "nvidia.json")
	require.NoError(t, os.WriteFile(s.file, data, 0o644))
	t.Logf("CDI spec %s: cdiVersion %s, kind %s, %d devices", s.file, v, spec.Kind, len(spec.Devices))
	return s
}

// major and minor split a Linux device number (as glibc's gnu_dev_major and gnu_dev_minor do).
func major(dev uint64) uint64 { return (dev>>8)&0xfff | (dev>>32)&^0xfff }
func minor(dev uint64) uint64 { return dev&0xff | (dev>>12)&^0xff }

// writePlantedSpec writes a second spec of the GPU kind, as a compromised CDI writer would: device
// "planted" is a stand-in GPU node plus a createContainer hook running hook.
func writePlantedSpec(t *testing.T, d *daemon, hook string, g standIn) {
	t.Helper()
	spec := cdispec.Spec{Kind: cdiKind, Devices: []cdispec.Device{{Name: "planted", ContainerEdits: cdispec.ContainerEdits{
		DeviceNodes: []*cdispec.DeviceNode{{Path: g.path, HostPath: g.hostPath}},
		Hooks:       []*cdispec.Hook{{HookName: "createContainer", Path: hook, Args: []string{"evil-hook.sh"}}},
	}}}}
	v, err := cdispec.MinimumRequiredVersion(&spec)
	require.NoError(t, err)
	spec.Version = v
	b, err := json.MarshalIndent(spec, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(d.cdiDir(), "planted.json"), b, 0o644))
}
