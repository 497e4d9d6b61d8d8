package nri

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPodResourcesErrorRefusesOnlyContainersThatMayNeedAGPU: while the
// kubelet's PodResources API cannot be asked, a container with no sign of
// a GPU (no GPU env, annotation or device node, and a pod the kubelet's
// device checkpoint records no GPU device for) starts unchanged; each
// signal alone refuses it, naming the signal; so does a checkpoint that
// cannot be read.
func TestPodResourcesErrorRefusesOnlyContainersThatMayNeedAGPU(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	require.NoError(t, os.WriteFile(ckpt, []byte(`{"Data":{"PodDeviceEntries":[
		{"PodUID":"uid-train","ContainerName":"main","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["1"]}},
		{"PodUID":"uid-nic","ContainerName":"main","ResourceName":"example.com/nic","DeviceIDs":{"0":["eth9"]}}]}}`), 0o644))
	f := newFixture(t, fixtureOpts{checkpoint: ckpt, annNS: []string{"monitoring"}})
	require.NoError(t, f.kubelet.Stop())

	plain := pod("web", "frontend", "runc")
	a, err := f.rt.Create(plain, ctr("main", []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"}, "/dev/fuse"))
	require.NoError(t, err, "no sign of a GPU: it starts")
	assert.Empty(t, cdiNames(a))
	assert.Empty(t, a.GetEnv())
	nic := pod("web", "router", "runc")
	nic.Uid = "uid-nic"
	_, err = f.rt.Create(nic, ctr("main", nil))
	require.NoError(t, err, "a pod holding devices of another vendor's resource starts")
	assert.Equal(t, 2.0, testutil.ToFloat64(f.plugin.metrics.outcomes.WithLabelValues("none_unverified")))

	withAnnotation := func(on string) (*api.PodSandbox, *api.Container) {
		p, c := pod("web", "ann-"+on, "runc"), ctr("main", nil)
		ann := map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=1"}
		if on == "pod" {
			p.Annotations = ann
		} else {
			c.Annotations = ann
		}
		return p, c
	}
	train := pod("ml", "train", "runc")
	train.Uid = "uid-train"
	request := pod("monitoring", "exporter", "runc")
	request.Annotations = map[string]string{"sandbox-gpu.io/gpu-request": "all"}
	for _, tc := range []struct {
		name string
		pod  *api.PodSandbox
		ctr  *api.Container
		why  string
	}{
		{"GPU env", pod("web", "env", "runc"), ctr("main", []string{"NVIDIA_VISIBLE_DEVICES=all"}), "env NVIDIA_VISIBLE_DEVICES"},
		{"container CDI annotation", nil, nil, "annotation cdi.k8s.io/gpu"},
		{"pod CDI annotation", nil, nil, "annotation cdi.k8s.io/gpu"},
		{"request annotation", request, ctr("main", nil), "annotation sandbox-gpu.io/gpu-request"},
		{"GPU device node", pod("web", "node", "runc"), ctr("main", nil, "/dev/nvidia0"), "GPU device nodes /dev/nvidia0"},
		{"the pod holds a GPU (sidecar)", train, ctr("sidecar", nil), "its pod holds devices of nvidia.com/gpu (kubelet checkpoint)"},
	} {
		p, c := tc.pod, tc.ctr
		if p == nil {
			p, c = withAnnotation(map[bool]string{true: "pod", false: "ctr"}[tc.name == "pod CDI annotation"])
		}
		_, err := f.rt.Create(p, c)
		require.Error(t, err, tc.name)
		assert.ErrorContains(t, err, "cannot tell which GPUs the kubelet allocated", tc.name)
		assert.ErrorContains(t, err, "it may need a GPU: "+tc.why, tc.name)
	}

	require.NoError(t, os.WriteFile(ckpt, []byte("{"), 0o644))
	_, err = f.rt.Create(pod("web", "frontend2", "runc"), ctr("main", nil))
	require.ErrorContains(t, err, "it may need a GPU: kubelet device checkpoint "+ckpt, "an unreadable checkpoint cannot tell")

	// Without a checkpoint nothing tells the pod's resources: fail closed, as before.
	g := newFixture(t, fixtureOpts{})
	require.NoError(t, g.kubelet.Stop())
	_, err = g.rt.Create(pod("web", "frontend", "runc"), ctr("main", nil))
	require.ErrorContains(t, err, "its pod's device resources are unknown")
}
