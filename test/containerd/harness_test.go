package containerd

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHarness proves the harness without the plugin: containerd runs real runc pods with the busybox
// image, the CDI spec's stand-in nodes reach a container through containerd's own CDI support, and
// containerd comes back after a restart with its pods. It also pins down which CDI requests
// containerd itself honours (the CRI CDIDevices field and cdi.k8s.io/ annotations of the container)
// and which it ignores (cdi.k8s.io/ annotations of the pod sandbox), which the plugin tests rely on.
func TestHarness(t *testing.T) {
	env := requireHostEnv(t)
	d := startDaemon(t, env)
	spec := writeCDISpec(t, d)
	gpu0, gpu1, gpu2 := spec.byIndex(t, "0"), spec.byIndex(t, "1"), spec.byIndex(t, "2")

	t.Run("pod", func(t *testing.T) {
		p := d.runPod(t, podOpts{})
		id, err := d.startContainer(t, p, ctrOpts{env: map[string]string{"HELLO": "world"}})
		require.NoError(t, err)
		ls := d.exec(t, id, "/bin/ls", "/dev")
		assert.Contains(t, strings.Fields(ls), "null", "ls /dev: %q", ls)
		assert.Empty(t, gpuNodes(d.charDevices(t, id)), "no CDI device requested")
		e := d.environ(t, id)
		assert.Equal(t, "world", e["HELLO"])
		assert.NotContains(t, e, commonEnv)
	})

	t.Run("cdi-devices-field", func(t *testing.T) {
		p := d.runPod(t, podOpts{})
		id, err := d.startContainer(t, p, ctrOpts{cdiDevices: []string{cdiKind + "=0", cdiKind + "=" + gpu2.uuid}})
		require.NoError(t, err)
		assert.Equal(t, spec.want(gpu0, gpu2), gpuNodes(d.charDevices(t, id)))
		assert.Equal(t, commonEnvValue, d.environ(t, id)[commonEnv], "the spec's common env edit")
	})

	t.Run("cdi-container-annotation", func(t *testing.T) {
		// containerd parses cdi.k8s.io/ annotations of the container config (CRI ContainerConfig).
		p := d.runPod(t, podOpts{})
		id, err := d.startContainer(t, p, ctrOpts{annotations: map[string]string{"cdi.k8s.io/harness": cdiKind + "=1"}})
		require.NoError(t, err)
		assert.Equal(t, spec.want(gpu1), gpuNodes(d.charDevices(t, id)))
	})

	t.Run("cdi-pod-annotation-ignored", func(t *testing.T) {
		// ... but not those of the pod sandbox: the plugin tests ask for GPUs that way.
		p := d.runPod(t, podOpts{annotations: map[string]string{"cdi.k8s.io/gpu": cdiKind + "=all"}})
		id, err := d.startContainer(t, p, ctrOpts{env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}})
		require.NoError(t, err)
		assert.Empty(t, gpuNodes(d.charDevices(t, id)))
	})

	t.Run("kata-handler", func(t *testing.T) {
		p := d.runPod(t, podOpts{handler: kataHandler})
		id, err := d.startContainer(t, p, ctrOpts{})
		require.NoError(t, err)
		d.exec(t, id, "/bin/true")
	})

	t.Run("restart", func(t *testing.T) {
		p := d.runPod(t, podOpts{})
		before, err := d.startContainer(t, p, ctrOpts{cdiDevices: []string{cdiKind + "=1"}})
		require.NoError(t, err)
		d.restart(t)
		// The container lived on in its shim; the restarted containerd finds it.
		assert.Equal(t, spec.want(gpu1), gpuNodes(d.charDevices(t, before)))
		q := d.runPod(t, podOpts{})
		after, err := d.startContainer(t, q, ctrOpts{})
		require.NoError(t, err)
		d.exec(t, after, "/bin/true")
	})
}
