package controllers

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

func setCapacity(t *testing.T, c client.Client, name string, res map[string]int64) {
	t.Helper()
	n := getNode(t, c, name)
	n.Status.Capacity = corev1.ResourceList{}
	for r, q := range res {
		n.Status.Capacity[corev1.ResourceName(r)] = *resource.NewQuantity(q, resource.DecimalSI)
	}
	require.NoError(t, c.Status().Update(context.Background(), n))
}

func kubeVirtCR(t *testing.T, c client.Client) *unstructured.Unstructured {
	t.Helper()
	cr := &unstructured.Unstructured{}
	cr.SetAPIVersion("kubevirt.io/v1")
	cr.SetKind("KubeVirt")
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: "kubevirt", Name: "kubevirt"}, cr))
	return cr
}

func resourceNames(t *testing.T, cr *unstructured.Unstructured, list string) []string {
	entries, _, _ := unstructured.NestedSlice(cr.Object, "spec", "configuration", "permittedHostDevices", list)
	var out []string
	for _, e := range entries {
		out = append(out, e.(map[string]any)["resourceName"].(string))
	}
	return out
}

func TestKubeVirtPermittedHostDevicesSync(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	ctx := context.Background()
	ensureNamespace(t, c, "kubevirt")
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt", "namespace": "kubevirt"},
		"spec": map[string]any{"configuration": map[string]any{"permittedHostDevices": map[string]any{
			"pciHostDevices": []any{map[string]any{"pciVendorSelector": "8086:1572", "resourceName": "intel.com/xl710"}}}}},
	}}
	require.NoError(t, c.Create(ctx, cr))
	t.Cleanup(func() { _ = c.Delete(ctx, cr) })
	setPolicy(t, c, sandboxOn("vm-passthrough"))
	startOperator(t, newClock())
	newNode(t, c, "kv-a", nil)
	newNode(t, c, "kv-b", nil)
	setCapacity(t, c, "kv-a", map[string]int64{"nvidia.com/GA102GL_A10": 2, "cpu": 8})
	setCapacity(t, c, "kv-b", map[string]int64{"nvidia.com/NVIDIA_A10-4Q": 6})

	testutil.Eventually(t, wait, "our entries added", func() bool {
		got := kubeVirtCR(t, c)
		return assert.ObjectsAreEqual([]string{"intel.com/xl710", "nvidia.com/GA102GL_A10"}, resourceNames(t, got, "pciHostDevices")) &&
			assert.ObjectsAreEqual([]string{"nvidia.com/NVIDIA_A10-4Q"}, resourceNames(t, got, "mediatedDevices"))
	})
	got := kubeVirtCR(t, c)
	pci, _, _ := unstructured.NestedSlice(got.Object, "spec", "configuration", "permittedHostDevices", "pciHostDevices")
	assert.Equal(t, "10DE:2236", pci[1].(map[string]any)["pciVendorSelector"])
	assert.Equal(t, true, pci[1].(map[string]any)["externalResourceProvider"])
	md, _, _ := unstructured.NestedSlice(got.Object, "spec", "configuration", "permittedHostDevices", "mediatedDevices")
	assert.Equal(t, "NVIDIA A10-4Q", md[0].(map[string]any)["mdevNameSelector"])
	gates, _, _ := unstructured.NestedStringSlice(got.Object, "spec", "configuration", "developerConfiguration", "featureGates")
	assert.Contains(t, gates, MDEVGate)

	// The A10s go away: our entry goes, the foreign one stays.
	setCapacity(t, c, "kv-a", map[string]int64{"cpu": 8})
	testutil.Eventually(t, wait, "our stale entry removed", func() bool {
		return assert.ObjectsAreEqual([]string{"intel.com/xl710"}, resourceNames(t, kubeVirtCR(t, c), "pciHostDevices"))
	})
	rv := kubeVirtCR(t, c).GetResourceVersion()
	mid := reconciles(t, "sandbox-gpu-kubevirt")
	setNodeLabel(t, c, "kv-b", "unrelated.example/touch", "1")
	testutil.Eventually(t, wait, "another sync", func() bool { return reconciles(t, "sandbox-gpu-kubevirt") >= mid+1 })
	assert.Equal(t, rv, kubeVirtCR(t, c).GetResourceVersion(), "no write when nothing changed")
}
