package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// setCapacity plays the kubelet: the node's capacity (retried when the
// operator wrote the Node in between).
func setCapacity(t *testing.T, c client.Client, name string, res map[string]int64) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := getNode(t, c, name)
		n.Status.Capacity = corev1.ResourceList{}
		for r, q := range res {
			n.Status.Capacity[corev1.ResourceName(r)] = *resource.NewQuantity(q, resource.DecimalSI)
		}
		return c.Status().Update(context.Background(), n)
	}))
}

// startKubeVirtTest readies a test of the KubeVirt sync on the API server:
// namespace ns and in it the KubeVirt CR "kubevirt" with configuration as
// its spec's (gone when the test ends), the policy with sandbox workloads
// on (def the default config) and the operator running. It returns the
// test's client and a reader of the CR.
func startKubeVirtTest(t *testing.T, ns string, configuration map[string]any, def string) (client.Client, func() *unstructured.Unstructured) {
	t.Helper()
	needEnv(t)
	c := testClient(t)
	ctx := context.Background()
	ensureNamespace(t, c, ns)
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
		"metadata": map[string]any{"name": "kubevirt", "namespace": ns},
		"spec":     map[string]any{"configuration": configuration},
	}}
	require.NoError(t, c.Create(ctx, cr))
	t.Cleanup(func() { _ = c.Delete(ctx, cr) })
	setPolicy(t, c, sandboxOn(def))
	startOperator(t, newClock())
	return c, func() *unstructured.Unstructured {
		got := &unstructured.Unstructured{}
		got.SetAPIVersion("kubevirt.io/v1")
		got.SetKind("KubeVirt")
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kubevirt"}, got))
		return got
	}
}

// permittedPCI is a KubeVirt configuration that permits one PCI host
// device, as its admin wrote it.
func permittedPCI(selector, name string) map[string]any {
	return map[string]any{"permittedHostDevices": map[string]any{
		"pciHostDevices": []any{map[string]any{"pciVendorSelector": selector, "resourceName": name}}}}
}

// publishPermitted plays a node's validator: it publishes the KubeVirt
// device plugin's entries in the node's annotation (a merge patch).
func publishPermitted(t *testing.T, c client.Client, node, entries string) {
	t.Helper()
	require.NoError(t, patchNode(c, node, func(n *corev1.Node) {
		n.Annotations = map[string]string{names.PermittedAnnotation: entries}
	}))
}

// capacityNode is a Node with labels, the entries its validator published
// (none when ann is "") and a capacity of each resource in res.
func capacityNode(name string, labels map[string]string, ann string, res ...string) corev1.Node {
	n := corev1.Node{}
	n.Name, n.Labels = name, labels
	if ann != "" {
		n.Annotations = map[string]string{names.PermittedAnnotation: ann}
	}
	n.Status.Capacity = corev1.ResourceList{}
	for _, r := range res {
		n.Status.Capacity[corev1.ResourceName(r)] = resource.MustParse("1")
	}
	return n
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
	c, get := startKubeVirtTest(t, "kubevirt", permittedPCI("8086:1572", "intel.com/xl710"), "vm-passthrough")
	newNode(t, c, "kv-a", nil)
	newNode(t, c, "kv-b", nil)
	setCapacity(t, c, "kv-a", map[string]int64{"nvidia.com/GA102GL_A10": 2, "cpu": 8})
	// An mdev vGPU type: only as its validator published it.
	publishPermitted(t, c, "kv-b", `{"mediatedDevices":[{"mdevNameSelector":"NVIDIA A10-4Q","resourceName":"nvidia.com/NVIDIA_A10-4Q"}]}`)
	setCapacity(t, c, "kv-b", map[string]int64{"nvidia.com/NVIDIA_A10-4Q": 6})
	// A model the curated table cannot map back: its validator published
	// the plugin's entries, including one it must not be trusted with.
	newNode(t, c, "kv-c", nil)
	publishPermitted(t, c, "kv-c", `{"pciHostDevices":[`+
		`{"pciVendorSelector":"10de:2b85","resourceName":"nvidia.com/GB202_RTX_PRO_6000"},`+
		`{"pciVendorSelector":"8086:1572","resourceName":"nvidia.com/GB202_RTX_PRO_6000"}]}`)
	setCapacity(t, c, "kv-c", map[string]int64{"nvidia.com/GB202_RTX_PRO_6000": 1})

	testutil.Eventually(t, wait, "our entries added", func() bool {
		got := get()
		return assert.ObjectsAreEqual([]string{"intel.com/xl710", "nvidia.com/GA102GL_A10", "nvidia.com/GB202_RTX_PRO_6000"}, resourceNames(t, got, "pciHostDevices")) &&
			assert.ObjectsAreEqual([]string{"nvidia.com/NVIDIA_A10-4Q"}, resourceNames(t, got, "mediatedDevices"))
	})
	got := get()
	pci, _, _ := unstructured.NestedSlice(got.Object, "spec", "configuration", "permittedHostDevices", "pciHostDevices")
	assert.Equal(t, "10DE:2236", pci[1].(map[string]any)["pciVendorSelector"])
	assert.Equal(t, true, pci[1].(map[string]any)["externalResourceProvider"])
	assert.Equal(t, "10DE:2B85", pci[2].(map[string]any)["pciVendorSelector"], "the published selector, normalised; the foreign one dropped")
	md, _, _ := unstructured.NestedSlice(got.Object, "spec", "configuration", "permittedHostDevices", "mediatedDevices")
	assert.Equal(t, "NVIDIA A10-4Q", md[0].(map[string]any)["mdevNameSelector"])
	gates, _, _ := unstructured.NestedStringSlice(got.Object, "spec", "configuration", "developerConfiguration", "featureGates")
	assert.Contains(t, gates, MDEVGate)

	// The A10s go away: our entry goes, the foreign one stays.
	setCapacity(t, c, "kv-a", map[string]int64{"cpu": 8})
	setCapacity(t, c, "kv-c", map[string]int64{"cpu": 8})
	testutil.Eventually(t, wait, "our stale entries removed", func() bool {
		return assert.ObjectsAreEqual([]string{"intel.com/xl710"}, resourceNames(t, get(), "pciHostDevices"))
	})
	rv := get().GetResourceVersion()
	mid := reconciles(t, "sandbox-gpu-kubevirt")
	setNodeLabel(t, c, "kv-b", "unrelated.example/touch", "1")
	testutil.Eventually(t, wait, "another sync", func() bool { return reconciles(t, "sandbox-gpu-kubevirt") >= mid+1 })
	assert.Equal(t, rv, get().GetResourceVersion(), "no write when nothing changed")
}

func TestPermittedPrefersPublishedAndTrustsOnlyNVIDIA(t *testing.T) {
	gpu := map[string]string{names.GPUPresentLabel: "true"}
	kv := map[string]string{names.GPUPresentLabel: "true", names.DeployLabel(names.KubeVirtDevicePlugin): "true"}
	node := capacityNode
	nodes := []corev1.Node{
		// Published, and advertised: taken as published (two selectors for one name is fine for KubeVirt).
		node("a", kv, `{"pciHostDevices":[{"pciVendorSelector":"10DE:2B85","resourceName":"nvidia.com/GB202"},`+
			`{"pciVendorSelector":"10DE:2B87","resourceName":"nvidia.com/GB202"},`+
			`{"pciVendorSelector":"15B3:1021","resourceName":"nvidia.com/GB202"},`+
			`{"pciVendorSelector":"10DE:0001","resourceName":"example.com/nic"}],`+
			`"mediatedDevices":[{"mdevNameSelector":"NVIDIA L40S-8Q","resourceName":"nvidia.com/NVIDIA_L40S-8Q"},`+
			`{"mdevNameSelector":"i915-GVTg_V5_4","resourceName":"nvidia.com/NVIDIA_L40S-8Q"}]}`,
			"nvidia.com/GB202", "nvidia.com/NVIDIA_L40S-8Q"),
		// Published but no longer advertised: nothing.
		node("b", kv, `{"pciHostDevices":[{"pciVendorSelector":"10DE:20B5","resourceName":"nvidia.com/GA100_A100_PCIE_80GB"}]}`),
		// Published, advertised, but the node no longer runs our KubeVirt
		// plugin (switched to Kata): the stale annotation counts for nothing.
		node("f", gpu, `{"pciHostDevices":[{"pciVendorSelector":"10DE:FFFF","resourceName":"nvidia.com/GA102GL_A10"}]}`, "nvidia.com/GA102GL_A10"),
		// Not published: curated names map back.
		node("c", gpu, "", "nvidia.com/GA102GL_A10"),
		// Not a GPU node: ignored even with capacity.
		node("d", nil, "", "nvidia.com/TU104GL_TESLA_T4"),
		// Garbage: reported, curated fallback still applies.
		node("e", kv, "{", "nvidia.com/GA102GL_A10"),
	}
	pci, mdev, problems := Permitted(nodes)
	var got []string
	for _, e := range pci {
		require.True(t, e.ExternalResourceProvider)
		got = append(got, e.ResourceName+"="+e.PCIVendorSelector)
	}
	assert.Equal(t, []string{"nvidia.com/GA102GL_A10=10DE:2236", "nvidia.com/GB202=10DE:2B85", "nvidia.com/GB202=10DE:2B87"}, got)
	require.Len(t, mdev, 1)
	assert.Equal(t, "NVIDIA L40S-8Q", mdev[0].MDEVNameSelector)
	require.Len(t, problems, 2)
	assert.Contains(t, problems[0], "node a:")
	assert.Contains(t, problems[0], "nvidia.com/GB202=15B3:1021")
	assert.Contains(t, problems[0], "example.com/nic=10DE:0001")
	assert.Contains(t, problems[0], "nvidia.com/NVIDIA_L40S-8Q=i915-GVTg_V5_4", "a node cannot turn mdev types of other vendors on")
	assert.Contains(t, problems[1], "node e:")

	// One node cannot blow up the cluster-wide CR.
	var many []string
	for i := 0; i < 100; i++ {
		many = append(many, fmt.Sprintf(`{"pciVendorSelector":"10DE:%04X","resourceName":"nvidia.com/GB202"}`, i))
	}
	pci, _, problems = Permitted([]corev1.Node{node("g", kv, `{"pciHostDevices":[`+strings.Join(many, ",")+`]}`, "nvidia.com/GB202")})
	assert.Empty(t, pci)
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0], "100 entries, more than 64")
	pci, _, problems = Permitted([]corev1.Node{node("h", kv, `{"pciHostDevices":[`+strings.Join(many[:10], ",")+`]}`, "nvidia.com/GB202")})
	assert.Len(t, pci, 8, "at most 8 selectors per resource")
	require.Len(t, problems, 1)
}

// A resource name the CR already permits to someone else (KubeVirt's own
// plugin, say) is left to them: not taken over, and so never removed.
func TestKubeVirtLeavesResourcesOthersPermit(t *testing.T) {
	c, get := startKubeVirtTest(t, "kubevirt-own", permittedPCI("10DE:1EB8", "nvidia.com/TU104GL_TESLA_T4"), "vm-passthrough")
	newNode(t, c, "kv-t4", nil)
	newNode(t, c, "kv-a10b", nil)
	setCapacity(t, c, "kv-t4", map[string]int64{"nvidia.com/TU104GL_TESLA_T4": 1})
	setCapacity(t, c, "kv-a10b", map[string]int64{"nvidia.com/GA102GL_A10": 1})
	testutil.Eventually(t, wait, "the A10 added next to the user's T4", func() bool {
		return assert.ObjectsAreEqual([]string{"nvidia.com/TU104GL_TESLA_T4", "nvidia.com/GA102GL_A10"}, resourceNames(t, get(), "pciHostDevices"))
	})
	entries, _, _ := unstructured.NestedSlice(get().Object, "spec", "configuration", "permittedHostDevices", "pciHostDevices")
	assert.Nil(t, entries[0].(map[string]any)["externalResourceProvider"], "the user's entry as they wrote it")
	assert.Equal(t, `["pci|nvidia.com/GA102GL_A10|10DE:2236"]`, get().GetAnnotations()[names.ManagedPermittedAnnotation])

	setCapacity(t, c, "kv-t4", map[string]int64{"cpu": 1})
	setCapacity(t, c, "kv-a10b", map[string]int64{"cpu": 1})
	testutil.Eventually(t, wait, "ours removed, the user's kept", func() bool {
		return assert.ObjectsAreEqual([]string{"nvidia.com/TU104GL_TESLA_T4"}, resourceNames(t, get(), "pciHostDevices"))
	})
}

// Only node events that change what the node permits wake the KubeVirt
// controller: a deploy label or a heartbeat does not, a new resource, a
// published entry or the node going away with entries does.
func TestKubeVirtWakesOnlyOnPermittedChanges(t *testing.T) {
	p := permittedChanged()
	node := func(labels map[string]string, res ...string) *corev1.Node {
		n := capacityNode("gpu-1", labels, "", res...)
		return &n
	}
	gpu := map[string]string{names.GPUPresentLabel: "true"}
	deployed := map[string]string{names.GPUPresentLabel: "true", names.DeployLabel(names.VFIOManager): "true"}
	bare, a10 := node(gpu), node(gpu, "nvidia.com/GA102GL_A10")
	withDeploy := node(deployed, "nvidia.com/GA102GL_A10")
	heartbeat := a10.DeepCopy()
	heartbeat.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}

	assert.False(t, p.Create(event.CreateEvent{Object: bare}), "a GPU node advertising nothing")
	assert.True(t, p.Create(event.CreateEvent{Object: a10}), "a node advertising an A10")
	assert.False(t, p.Update(event.UpdateEvent{ObjectOld: a10, ObjectNew: withDeploy}), "a deploy label")
	assert.False(t, p.Update(event.UpdateEvent{ObjectOld: a10, ObjectNew: heartbeat}), "a heartbeat")
	assert.True(t, p.Update(event.UpdateEvent{ObjectOld: bare, ObjectNew: a10}), "the kubelet advertises the A10")
	assert.True(t, p.Update(event.UpdateEvent{ObjectOld: a10, ObjectNew: bare}), "the A10 is gone")
	assert.True(t, p.Delete(event.DeleteEvent{Object: a10}), "a node with entries goes")
	assert.False(t, p.Delete(event.DeleteEvent{Object: bare}), "a node without entries goes")
}
