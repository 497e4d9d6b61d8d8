package containerd

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources/podresourcestest"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gpuNumbered matches the per-GPU nodes (/dev/nvidia0, ...), not /dev/nvidiactl and friends.
var gpuNumbered = regexp.MustCompile(`^/dev/nvidia[0-9]+$`)

// TestPlugin runs cmd/nri-gpu-plugin, as a built binary, against a real containerd and a fake
// kubelet: a container gets exactly the GPUs the kubelet's PodResources API says it holds (as the
// CDI spec's device nodes and common edits), nothing without an allocation whatever it asks for,
// nothing in a Kata pod, and the plugin reconnects when containerd restarts.
func TestPlugin(t *testing.T) {
	env := requireHostEnv(t)
	bin := pluginBinary(t)
	d := startDaemon(t, env)
	spec := writeCDISpec(t, d)
	gpu0, gpu1, gpu2 := spec.byIndex(t, "0"), spec.byIndex(t, "1"), spec.byIndex(t, "2")
	kl := podresourcestest.New(d.path("pr.sock"))
	kl.SetAllocatable(cdiKind, "0", "1", "2")
	require.NoError(t, kl.Start())
	t.Cleanup(func() { assert.NoError(t, kl.Stop(), "PodResources server") })
	p := proc.StartProgram(t, bin, pluginArgs(d, kl)...)
	waitConnected(t, d, p)
	const ns = "gpu-test"

	t.Run("allocated", func(t *testing.T) {
		// Two GPUs to one container; its sidecar, known to the kubelet, holds none.
		kl.Allocate(ns, "alloc", "cuda", cdiKind, "0", "2")
		kl.Allocate(ns, "alloc", "sidecar", "example.com/other", "x")
		pd := d.runPod(t, podOpts{namespace: ns, name: "alloc"})
		cuda, err := d.startContainer(t, pd, ctrOpts{name: "cuda"})
		require.NoError(t, err)
		assert.Equal(t, spec.want(gpu0, gpu2), gpuNodes(d.charDevices(t, cuda)),
			"allocation {%s: [0 2]}: /dev/nvidia0, /dev/nvidia2 and the common /dev/nvidiactl, not /dev/nvidia1", cdiKind)
		e := d.environ(t, cuda)
		assert.Equal(t, commonEnvValue, e[commonEnv], "the CDI spec's common env edit")
		t.Logf("report: env of the allocated container: NVIDIA_VISIBLE_DEVICES=%q", e["NVIDIA_VISIBLE_DEVICES"])
		sidecar, err := d.startContainer(t, pd, ctrOpts{name: "sidecar"})
		require.NoError(t, err)
		assert.Empty(t, gpuNodes(d.charDevices(t, sidecar)), "the sidecar holds no GPU")
	})

	t.Run("allocated-by-uuid", func(t *testing.T) {
		// The NVIDIA device plugin's default device IDs are GPU UUIDs: CDI device names too.
		kl.Allocate(ns, "by-uuid", "cuda", cdiKind, gpu1.uuid)
		pd := d.runPod(t, podOpts{namespace: ns, name: "by-uuid"})
		id, err := d.startContainer(t, pd, ctrOpts{name: "cuda"})
		require.NoError(t, err)
		assert.Equal(t, spec.want(gpu1), gpuNodes(d.charDevices(t, id)))
	})

	t.Run("unallocated", func(t *testing.T) {
		// Known to the kubelet, no devices; it asks for all GPUs every way but the kubelet's:
		// containerd ignores a pod's cdi.k8s.io/ annotations (TestHarness/cdi-pod-annotation-ignored)
		// and the nvidia.com/gpu.request container annotation, so any GPU node would be the plugin's.
		// The plugin's own sandbox-gpu.io/gpu-request pod annotation counts only in namespaces
		// given with --annotation-namespace (none here).
		kl.Allocate(ns, "greedy", "cuda", cdiKind)
		pd := d.runPod(t, podOpts{namespace: ns, name: "greedy", annotations: map[string]string{
			"cdi.k8s.io/gpu":             cdiKind + "=all",
			"sandbox-gpu.io/gpu-request": "all",
		}})
		id, err := d.startContainer(t, pd, ctrOpts{name: "cuda",
			env:         map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"},
			annotations: map[string]string{"nvidia.com/gpu.request": "all"}})
		require.NoError(t, err)
		assert.Empty(t, gpuNodes(d.charDevices(t, id)))
		// The plugin's own mark (no GPU node would appear here without a plugin either): NVIDIA's
		// env request is voided, so NVIDIA's hooks or runtime inject nothing later.
		assert.Equal(t, "void", d.environ(t, id)["NVIDIA_VISIBLE_DEVICES"])
	})

	t.Run("privileged-management-pod", func(t *testing.T) {
		// NVIDIA's container stack (device plugin, dcgm-exporter, GPU feature discovery) runs
		// privileged and asks with NVIDIA_VISIBLE_DEVICES=all, holding no allocation: it keeps that
		// env-based access (nvidia-container-toolkit's accept-envvar-when-privileged), where an
		// unprivileged container asking the same way gets "void" ("unallocated" above).
		kl.Allocate(ns, "dcgm-exporter", "exporter", cdiKind)
		pd := d.runPod(t, podOpts{namespace: ns, name: "dcgm-exporter", privileged: true})
		id, err := d.startContainer(t, pd, ctrOpts{name: "exporter", privileged: true,
			env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}})
		require.NoError(t, err, "a privileged management container is not refused")
		assert.Equal(t, "all", d.environ(t, id)["NVIDIA_VISIBLE_DEVICES"])
	})

	t.Run("unknown-pod", func(t *testing.T) {
		// A pod the kubelet does not know (Get answers "not found"): it runs, with no GPU.
		pd := d.runPod(t, podOpts{namespace: ns, name: "stranger"})
		id, err := d.startContainer(t, pd, ctrOpts{name: "cuda", env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}})
		require.NoError(t, err)
		assert.Empty(t, gpuNodes(d.charDevices(t, id)))
		assert.Equal(t, "void", d.environ(t, id)["NVIDIA_VISIBLE_DEVICES"], "the plugin saw the container")
	})

	t.Run("runtime-added-nodes-removed", func(t *testing.T) {
		// containerd itself injects CDI devices named by a container's cdi.k8s.io/ annotation
		// (TestHarness/cdi-container-annotation), before NRI. Without an allocation the container must
		// not run with them: the plugin removes them, or refuses the container.
		kl.Allocate(ns, "sneaky", "cuda", cdiKind)
		pd := d.runPod(t, podOpts{namespace: ns, name: "sneaky"})
		id, err := d.startContainer(t, pd, ctrOpts{name: "cuda",
			annotations: map[string]string{"cdi.k8s.io/sneaky": cdiKind + "=all"}})
		if refused(t, err, pd) {
			return
		}
		nodes := gpuNodes(d.charDevices(t, id))
		for n := range nodes {
			assert.NotRegexp(t, gpuNumbered, n, "GPU node in a container without an allocation")
		}
		t.Logf("report: nodes left in the unallocated container whose annotation containerd honoured: %v", nodes)
	})

	t.Run("allocated-only-its-own", func(t *testing.T) {
		// One GPU allocated, another one asked for by annotation (containerd injects it): the
		// container runs with the allocated one only, or is refused.
		kl.Allocate(ns, "extra", "cuda", cdiKind, "0")
		pd := d.runPod(t, podOpts{namespace: ns, name: "extra"})
		id, err := d.startContainer(t, pd, ctrOpts{name: "cuda",
			annotations: map[string]string{"cdi.k8s.io/extra": cdiKind + "=1"}})
		if refused(t, err, pd) {
			return
		}
		assert.Equal(t, spec.want(gpu0), gpuNodes(d.charDevices(t, id)))
	})

	t.Run("kata-handler", func(t *testing.T) {
		// A sandboxed pod (runtime handler kata*) is left alone even with an allocation: its GPUs go
		// to the guest by VFIO, not as device nodes of the host.
		kl.Allocate(ns, "kata", "cuda", cdiKind, "0", "1")
		pd := d.runPod(t, podOpts{namespace: ns, name: "kata", handler: kataHandler})
		id, err := d.startContainer(t, pd, ctrOpts{name: "cuda"})
		require.NoError(t, err)
		assert.Empty(t, gpuNodes(d.charDevices(t, id)), "pod on runtime handler %s", kataHandler)
	})

	t.Run("fail-closed", func(t *testing.T) {
		// An allocated device the CDI spec does not know: the container is not created without it,
		// and the error names the pod, the container and the device.
		kl.Allocate(ns, "missing", "cuda", cdiKind, "7")
		pd := d.runPod(t, podOpts{namespace: ns, name: "missing"})
		_, err := d.startContainer(t, pd, ctrOpts{name: "cuda"})
		require.Error(t, err, "a container whose allocated GPU 7 is not in the CDI spec must not run")
		for _, s := range []string{"missing", "cuda", "7"} {
			assert.Contains(t, err.Error(), s)
		}
		t.Logf("report: %v", err)
	})

	t.Run("planted-spec-hook", func(t *testing.T) {
		// A compromised CDI writer on the node plants a spec of the GPU kind whose device brings a
		// hook of its own: the plugin refuses the container before the runtime creates it, so the
		// hook (a real script that would leave a marker) never runs.
		marker := filepath.Join(d.path("dev"), "pwned")
		hook := d.path("evil-hook.sh")
		require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755))
		writePlantedSpec(t, d, hook, spec.gpus[0])
		kl.Allocate(ns, "planted", "cuda", cdiKind, "planted")
		pd := d.runPod(t, podOpts{namespace: ns, name: "planted"})
		_, err := d.startContainer(t, pd, ctrOpts{name: "cuda"})
		require.Error(t, err, "a container whose GPU spec brings a foreign hook must not run")
		assert.Contains(t, err.Error(), "a GPU CDI spec brings what the CDI policy does not allow")
		assert.Contains(t, err.Error(), filepath.Join(d.cdiDir(), "planted.json")+`: devices["planted"].containerEdits.hooks[0]: hook `+hook)
		_, statErr := os.Stat(marker)
		assert.ErrorIs(t, statErr, os.ErrNotExist, "the planted hook never ran")
	})

	t.Run("hostile-specs", func(t *testing.T) { testHostileSpecs(t, d, kl, ns, gpu2) })

	t.Run("containerd-restart", func(t *testing.T) {
		kl.Allocate(ns, "before", "cuda", cdiKind, "1")
		pb := d.runPod(t, podOpts{namespace: ns, name: "before"})
		before, err := d.startContainer(t, pb, ctrOpts{name: "cuda"})
		require.NoError(t, err)
		require.Equal(t, spec.want(gpu1), gpuNodes(d.charDevices(t, before)))

		d.restart(t)
		require.False(t, p.Exited(), "nri-gpu-plugin exited when containerd stopped: %v", p.Err())
		waitConnected(t, d, p) // on the restarted containerd's log

		// The running container kept its GPU; a new one gets its own.
		assert.Equal(t, spec.want(gpu1), gpuNodes(d.charDevices(t, before)))
		kl.Allocate(ns, "after", "cuda", cdiKind, "2")
		pa := d.runPod(t, podOpts{namespace: ns, name: "after"})
		after, err := d.startContainer(t, pa, ctrOpts{name: "cuda"})
		require.NoError(t, err)
		assert.Equal(t, spec.want(gpu2), gpuNodes(d.charDevices(t, after)))
	})

	t.Run("sigterm", func(t *testing.T) {
		p.Stop(t, exitWithin)
	})
	t.Logf("PodResources calls: %+v", kl.Calls())
}

// refused tells whether the container was refused, requiring the error to name the pod. containerd
// 2.4.2 (NRI v0.12.3) does not apply an NRI RemoveDevice of a device already in the container's spec
// (pkg/adaptation/result.go forwards device removals only among plugins; containerd/nri#216), so
// refusing the container is how a plugin keeps such devices out there.
func refused(t *testing.T, err error, p *pod) bool {
	t.Helper()
	if err == nil {
		return false
	}
	assert.Contains(t, err.Error(), p.name(), "the refusal names the pod")
	t.Logf("report: refused: %v", err)
	return true
}
