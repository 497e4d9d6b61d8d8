package containerd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// pgpuKind is the Kata plugin's default resource and CDI kind.
const pgpuKind = "nvidia.com/pgpu"

// TestKataCDIFolder runs the README's layout for the Kata plugin's specs on a real containerd: a spec
// of nvidia.com/pgpu as the plugin writes it (kata.Spec's shape: the group's node per device, the
// VFIO container node in the common edits, its marker line first) lies in a folder of its own, listed first (lowest priority)
// in containerd's cdi_spec_dirs before the folder of NVIDIA's spec. A Kata pod asking for
// nvidia.com/pgpu=<group> (the CRI CDIDevices field, as the kubelet passes the Kata plugin's CDI
// names) gets the group's /dev/vfio nodes; an nvidia.com/gpu spec planted in the Kata folder cannot
// shadow NVIDIA's device of the same name.
func TestKataCDIFolder(t *testing.T) {
	env := requireHostEnv(t)
	d := startDaemon(t, env)
	spec := writeCDISpec(t, d)
	gpu0 := spec.byIndex(t, "0")

	// Stand-in VFIO nodes under the daemon's dev folder, with the numbers of /dev/zero and /dev/full.
	require.NoError(t, os.MkdirAll(d.path("dev", "vfio"), 0o755))
	numbers := map[string]string{}
	for name, like := range map[string]string{"vfio": "/dev/zero", "7": "/dev/full"} {
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat(like, &st))
		require.NoError(t, syscall.Mknod(d.path("dev", "vfio", name), syscall.S_IFCHR|0o666, int(st.Rdev)))
		numbers["/dev/vfio/"+name] = fmt.Sprintf("%d:%d", major(st.Rdev), minor(st.Rdev))
	}
	pgpu := cdispec.Spec{Version: "0.5.0", Kind: pgpuKind,
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/vfio/vfio", HostPath: d.path("dev", "vfio", "vfio")}}},
		Devices: []cdispec.Device{{Name: "7", ContainerEdits: cdispec.ContainerEdits{
			DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/vfio/7", HostPath: d.path("dev", "vfio", "7")}}}}}}
	b, err := json.Marshal(pgpu)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(d.kataCDIDir(), "sandbox-gpu-kata-nvidia.com-pgpu.yaml"),
		append([]byte("# sandbox-gpu.io/written-by: kata-device-plugin\n"), b...), 0o644))

	// A planted nvidia.com/gpu=0 in the Kata folder, with the numbers of /dev/full.
	planted := cdispec.Spec{Version: "0.5.0", Kind: cdiKind, Devices: []cdispec.Device{{Name: "0",
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: gpu0.path, HostPath: d.path("dev", "vfio", "7")}}}}}}
	b, err = json.Marshal(planted)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(d.kataCDIDir(), "planted.json"), b, 0o644))

	t.Run("pgpu-resolves", func(t *testing.T) {
		p := d.runPod(t, podOpts{handler: kataHandler})
		id, err := d.startContainer(t, p, ctrOpts{cdiDevices: []string{pgpuKind + "=7"}})
		require.NoError(t, err)
		devs := d.charDevices(t, id)
		assert.Equal(t, numbers["/dev/vfio/7"], devs["/dev/vfio/7"], "the group's node from the Kata folder's spec")
		assert.Equal(t, numbers["/dev/vfio/vfio"], devs["/dev/vfio/vfio"], "the VFIO container node")
	})

	t.Run("no-shadowing", func(t *testing.T) {
		p := d.runPod(t, podOpts{})
		id, err := d.startContainer(t, p, ctrOpts{cdiDevices: []string{cdiKind + "=0"}})
		require.NoError(t, err)
		assert.Equal(t, spec.want(gpu0), gpuNodes(d.charDevices(t, id)),
			"nvidia.com/gpu=0 from NVIDIA's folder, not the Kata folder's planted spec")
	})
}
