package simnode

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

const testRoot = "/tmp/sgc123/simnode"

// operandPod is the pod the DaemonSet controller makes from the operator's DaemonSet of op.
func operandPod(t *testing.T, op string) *corev1.Pod {
	t.Helper()
	ds, err := operands.Build(op, &v1alpha1.SandboxGPUPolicySpec{}, operands.Options{Namespace: "sandbox-gpu", Registry: "r", Version: "v"})
	require.NoError(t, err, op)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: ds.Name + "-", Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels},
		Spec: *ds.Spec.Template.Spec.DeepCopy()}
}

// hostPaths maps each hostPath of the pod's first container to "<mount path>:<rw|ro>".
func hostPaths(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		for _, m := range pod.Spec.Containers[0].VolumeMounts {
			if m.Name == v.Name && v.HostPath != nil {
				out[v.HostPath.Path] = m.MountPath + map[bool]string{true: ":ro", false: ":rw"}[m.ReadOnly]
			}
		}
	}
	return out
}

// Every operand that reads the host (it mounts the node's /sys) gets the tree's sys, dev and proc
// at the same paths, which must exist, and is pointed at them; the node's /sys, /dev and /dev/vfio
// are not mounted; the writers' sys and dev are writable, the readers' not; the device plugins find
// the tree's device nodes, the NRI plugin checks specs against the tree's dev; NVIDIA's vGPU host
// driver and the operands that never read the host are untouched. (What operands.Options.HostRoot
// did in the product before; TestProductionHostMounts pins the mounts this starts from.)
func TestOntoHost(t *testing.T) {
	readers := map[string]string{ // operand -> its sys and dev mounts
		names.VFIOManager: "rw", names.ReleaseOperand(names.VFIOManager): "rw",
		names.VGPUDeviceManager: "rw", names.ReleaseOperand(names.VGPUDeviceManager): "rw",
		names.KubeVirtDevicePlugin: "ro", names.KataDevicePlugin: "ro", names.GPUDiscovery: "ro",
	}
	for _, op := range operands.Names() {
		pod := operandPod(t, op)
		before := pod.DeepCopy()
		changed, err := OntoHost(testRoot, pod)
		require.NoError(t, err, op)
		c := pod.Spec.Containers[0]
		added := slices.DeleteFunc(slices.Clone(c.Args), func(a string) bool { return slices.Contains(before.Spec.Containers[0].Args, a) })
		rw, reads := readers[op]
		switch {
		case reads:
			assert.True(t, changed, op)
			got := hostPaths(pod)
			assert.Equal(t, testRoot+"/sys:"+rw, got[testRoot+"/sys"], op)
			assert.Equal(t, testRoot+"/dev:"+rw, got[testRoot+"/dev"], op)
			assert.Equal(t, testRoot+"/proc:ro", got[testRoot+"/proc"], op)
			for _, h := range []string{"/sys", "/dev", "/dev/vfio"} {
				assert.NotContains(t, got, h, "%s: the node's %s is not mounted", op, h)
			}
			for _, v := range pod.Spec.Volumes {
				if v.HostPath != nil && strings.HasPrefix(v.HostPath.Path, testRoot) {
					assert.Equal(t, corev1.HostPathDirectory, *v.HostPath.Type, "%s: the tree must be there", op)
				}
				assert.NotContains(t, []string{"/sys", "/dev", "/dev/vfio"}, volumePath(v), "%s: no volume of the node's folders left", op)
			}
			want := []string{"--sysfs-root=" + testRoot + "/sys", "--dev-root=" + testRoot + "/dev", "--proc-root=" + testRoot + "/proc"}
			if op == names.KubeVirtDevicePlugin || op == names.KataDevicePlugin {
				want = append(want, "--node-dev-root="+testRoot+"/dev") // the runtime finds the tree's device nodes
			}
			assert.Equal(t, want, added, op)
			// Every other mount is the production one.
			for host, m := range hostPaths(before) {
				if !slices.Contains([]string{"/sys", "/dev", "/dev/vfio"}, host) {
					assert.Equal(t, m, got[host], "%s: %s", op, host)
				}
			}
		case op == names.NRIPlugin:
			assert.True(t, changed, op)
			assert.Equal(t, []string{"--dev-root=" + testRoot + "/dev"}, added, "only the tree's dev folder named: nothing mounted")
			pod.Spec.Containers[0].Args = before.Spec.Containers[0].Args
			assert.Equal(t, before, pod)
		default:
			assert.False(t, changed, op)
			assert.Equal(t, before, pod, "%s does not read the host through our roots", op)
		}
	}
}

func volumePath(v corev1.Volume) string {
	if v.HostPath == nil {
		return ""
	}
	return v.HostPath.Path
}

// What this rewrite cannot place is an error, never a pod half on the node's host.
func TestOntoHostRefuses(t *testing.T) {
	for _, bad := range []string{"relative/dir", "/a/../b", "/trailing/", ""} {
		_, err := OntoHost(bad, operandPod(t, names.VFIOManager))
		assert.ErrorContains(t, err, "host root", "%q", bad)
	}
	pod := operandPod(t, names.VFIOManager)
	pod.Spec.Containers[0].Args = append(pod.Spec.Containers[0].Args, "--sysfs-root=/elsewhere")
	_, err := OntoHost(testRoot, pod)
	assert.ErrorContains(t, err, "already has --sysfs-root", "a root the product set itself")

	pod = operandPod(t, names.KataDevicePlugin)
	pod.Spec.Containers[0].Args = append(pod.Spec.Containers[0].Args, "--node-dev-root", "/x")
	_, err = OntoHost(testRoot, pod)
	assert.ErrorContains(t, err, "already has --node-dev-root")

	pod = operandPod(t, names.GPUDiscovery)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: treeVolumePrefix + "sys"})
	_, err = OntoHost(testRoot, pod)
	assert.ErrorContains(t, err, "volume "+treeVolumePrefix+"sys")
}
