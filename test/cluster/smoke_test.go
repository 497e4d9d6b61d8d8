package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Deadlines, generous for a loaded 2-core machine; polling returns as soon as the state holds.
const (
	namespaceWithin = 60 * time.Second
	podWithin       = 90 * time.Second
	callWithin      = 30 * time.Second
	testWithin      = 3 * time.Minute
)

// TestNodeReady: the kubelet registered its Node through NodeRestriction, with its label, the
// kubelet and runtime versions of the parts built here, and allocatable resources.
func TestNodeReady(t *testing.T) {
	c := requireCluster(t)
	ctx := testContext(t, callWithin)
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "true", node.Labels["sandbox-gpu.io/test-cluster"])
	assert.True(t, strings.HasPrefix(node.Status.NodeInfo.KubeletVersion, "v1."), "kubelet %s", node.Status.NodeInfo.KubeletVersion)
	// go install leaves containerd's version unstamped beyond the module version: 2.4.2+unknown.
	assert.True(t, strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://2.4.2"),
		"runtime %s", node.Status.NodeInfo.ContainerRuntimeVersion)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
		q := node.Status.Allocatable[r]
		assert.False(t, q.IsZero(), "allocatable %s", r)
	}
	t.Logf("node %s Ready, kubelet %s, %s, cluster up in %v", node.Name, node.Status.NodeInfo.KubeletVersion,
		node.Status.NodeInfo.ContainerRuntimeVersion, startedIn.Round(time.Millisecond))
}

// TestPod: a busybox pod from the imported image runs with a bridge address, a hostPath volume and
// a service-account token with which it reaches kube-apiserver through the kubernetes Service (as
// the operator and the node agents will); exec and logs go through kube-apiserver to the kubelet
// and containerd.
func TestPod(t *testing.T) {
	c := requireCluster(t)
	ctx := testContext(t, testWithin)
	ns := "smoke-pod"
	require.NoError(t, c.CreateNamespace(ctx, ns, namespaceWithin))
	pod := busyboxPod("hello", "echo hello-from-pod; exec sleep 2147483647")
	withProbe(pod, buildProbe(t))
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	start := time.Now()
	got, err := c.WaitForPod(ctx, ns, pod.Name, podWithin, cluster.PodRunning)
	require.NoError(t, err)
	t.Logf("pod Running %v after creation, IP %s", time.Since(start).Round(time.Millisecond), got.Status.PodIP)

	_, subnet, err := net.ParseCIDR("10.244.0.0/24")
	require.NoError(t, err)
	assert.True(t, subnet.Contains(net.ParseIP(got.Status.PodIP)), "pod IP %q from the bridge network", got.Status.PodIP)

	out, _, err := c.Exec(ctx, ns, pod.Name, "main", "/bin/sh", "-c", "echo $((6*7))")
	require.NoError(t, err)
	assert.Equal(t, "42", strings.TrimSpace(out))
	out, _, err = c.Exec(ctx, ns, pod.Name, "main", "/bin/cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	require.NoError(t, err)
	assert.Equal(t, ns, out, "the projected service-account volume")

	// In-cluster access: the kubernetes Service's address and the pod's service-account token reach
	// kube-apiserver (its certificate verified with the mounted CA), which knows who asks.
	out, _, err = c.Exec(ctx, ns, pod.Name, "main", "/probe/apiprobe")
	require.NoError(t, err)
	assert.Contains(t, out, `"username":"system:serviceaccount:`+ns+`:default"`, "SelfSubjectReview from the pod")

	require.NoError(t, pollTrue(ctx, podWithin, func() (bool, error) {
		logs, err := c.PodLogs(ctx, ns, pod.Name, "main")
		return strings.Contains(logs, "hello-from-pod"), err
	}), "pod log")

	deletePodAndWait(t, c, ns, pod.Name)
}

// TestDaemonSetFollowsNodeLabel: a DaemonSet with a node selector places nothing until the node
// carries the label, then its pod runs on the node, and leaves when the label goes (the way the
// operator's deploy labels place its operands).
func TestDaemonSetFollowsNodeLabel(t *testing.T) {
	c := requireCluster(t)
	ctx := testContext(t, testWithin)
	ns := "smoke-daemonset"
	label := "sandbox-gpu.test/daemonset"
	require.NoError(t, c.CreateNamespace(ctx, ns, namespaceWithin))
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "operand"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "operand"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "operand"}},
				Spec:       busyboxPod("", "exec sleep 2147483647").Spec,
			},
		},
	}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{label: "true"}
	_, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		// t.Context is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), callWithin)
		defer cancel()
		setNodeLabel(ctx, t, c, label, nil)
	})

	// The controller has seen it and places nothing: no node carries the label.
	require.NoError(t, pollTrue(ctx, podWithin, func() (bool, error) {
		got, err := c.Client.AppsV1().DaemonSets(ns).Get(ctx, ds.Name, metav1.GetOptions{})
		return err == nil && got.Status.ObservedGeneration >= 1 && got.Status.DesiredNumberScheduled == 0, err
	}), "DaemonSet observed with nothing to place")

	setNodeLabel(ctx, t, c, label, ptr.To("true"))
	start := time.Now()
	var podName string
	require.NoError(t, pollTrue(ctx, podWithin, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=operand"})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		p := pods.Items[0]
		podName = p.Name
		return p.Spec.NodeName == c.NodeName() && cluster.PodRunning(&p), nil
	}), "the DaemonSet's pod Running on the labelled node")
	t.Logf("DaemonSet pod %s Running %v after the label", podName, time.Since(start).Round(time.Millisecond))

	setNodeLabel(ctx, t, c, label, nil)
	require.NoError(t, pollTrue(ctx, podWithin, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=operand"})
		return err == nil && len(pods.Items) == 0, err
	}), "the DaemonSet's pod gone once the label is")
}

// busyboxPod runs script with sh in the busybox image (never pulled: there is no registry). busybox
// sleep as PID 1 ignores SIGTERM, so the grace period is short.
func busyboxPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           cluster.BusyboxImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", script},
			}},
		},
	}
}

// deletePodAndWait deletes a pod and waits until the kubelet has stopped it and it is gone.
func deletePodAndWait(t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	ctx := testContext(t, podWithin)
	require.NoError(t, c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}))
	require.NoError(t, pollTrue(ctx, podWithin, func() (bool, error) {
		_, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}), "pod %s/%s deleted", ns, name)
}

// setNodeLabel sets (value non-nil) or removes a label of the cluster's node.
func setNodeLabel(ctx context.Context, t *testing.T, c *cluster.Cluster, key string, value *string) {
	t.Helper()
	setNodeMetadata(ctx, t, c, "labels", key, value)
}

// setNodeAnnotation sets (value non-nil) or removes an annotation of the cluster's node, as an
// admin does with kubectl annotate.
func setNodeAnnotation(ctx context.Context, t *testing.T, c *cluster.Cluster, key string, value *string) {
	t.Helper()
	setNodeMetadata(ctx, t, c, "annotations", key, value)
}

// setNodeMetadata sets or removes one entry of the node's labels or annotations (a merge patch).
func setNodeMetadata(ctx context.Context, t *testing.T, c *cluster.Cluster, field, key string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{%q:{%q:%s}}}`, field, key, v)
	_, err := c.Client.CoreV1().Nodes().Patch(ctx, c.NodeName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err, "node %s %s", field, key)
}

// buildProbe builds internal/apiprobe, static, into a folder of the test and returns the folder.
func buildProbe(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	start := time.Now()
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "apiprobe"), "./internal/apiprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./internal/apiprobe:\n%s", out)
	t.Logf("apiprobe built in %v", time.Since(start).Round(time.Millisecond))
	return dir
}

// withProbe mounts the folder holding apiprobe at /probe in the pod's first container (a hostPath:
// the folder is the same in the node's mount namespace).
func withProbe(pod *corev1.Pod, dir string) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "probe", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)},
	}})
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: "probe", MountPath: "/probe", ReadOnly: true})
}
