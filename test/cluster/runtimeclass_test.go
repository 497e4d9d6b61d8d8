package cluster

import (
	"context"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// testHandler is a CRI runtime handler of the suite's containerd, runc underneath
// (Options.RuncHandlers): what stands in for a sandbox runtime such as Kata's.
const testHandler = "sandbox-gpu-test"

// TestRuntimeClass: a RuntimeClass names a runtime handler of containerd's config, and a pod of that
// class runs through it (the kubelet passes the handler to RunPodSandbox).
func TestRuntimeClass(t *testing.T) {
	c := requireCluster(t)
	ctx := testContext(t, testWithin)
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: testHandler}
	_, err := c.Client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{})
	require.NoError(t, err)
	ns := "smoke-runtimeclass"
	require.NoError(t, c.CreateNamespace(ctx, ns, namespaceWithin))
	pod := busyboxPod("sandboxed", "exec sleep 2147483647")
	pod.Spec.RuntimeClassName = ptr.To(rc.Name)
	runPodThrough(ctx, t, c, ns, pod, testHandler)
	deletePodAndWait(t, c, ns, pod.Name)
}

// runPodThrough creates the pod in ns, waits until it runs and requires containerd to report
// handler as the runtime handler of its sandbox.
func runPodThrough(ctx context.Context, t *testing.T, c *cluster.Cluster, ns string, pod *corev1.Pod, handler string) {
	t.Helper()
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.WaitForPod(ctx, ns, pod.Name, podWithin, cluster.PodRunning)
	require.NoError(t, err)
	handlers, err := c.SandboxHandlers(ctx, ns, pod.Name)
	require.NoError(t, err)
	assert.Equal(t, []string{handler}, handlers, "the pod sandbox's runtime handler")
}
