package controllers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// What the KubeVirt device plugin writes for each kind of vGPU, as the
// validator publishes it on its Node.
const (
	publishedMdev  = `{"mediatedDevices":[{"mdevNameSelector":"NVIDIA A10-4Q","resourceName":"nvidia.com/NVIDIA_A10-4Q","externalResourceProvider":true}]}`
	publishedSRIOV = `{"pciHostDevices":[{"pciVendorSelector":"10de:26b9","resourceName":"nvidia.com/NVIDIA_L40S-24Q","externalResourceProvider":true}]}`
)

// A vGPU type resource is taken only as its node published it: mdev types
// as mediatedDevices, SR-IOV VF types as pciHostDevices; without a
// published entry nothing is guessed (the name does not tell the kinds
// apart, and a VF's device id is not in it).
func TestPermittedVGPUNeedsThePublishedEntry(t *testing.T) {
	kv := map[string]string{names.GPUPresentLabel: "true", names.DeployLabel(names.KubeVirtDevicePlugin): "true"}
	node := func(name, ann string, res ...string) corev1.Node { return capacityNode(name, kv, ann, res...) }
	pci, mdev, problems := Permitted([]corev1.Node{
		node("mdev", publishedMdev, "nvidia.com/NVIDIA_A10-4Q"),
		node("sriov", publishedSRIOV, "nvidia.com/NVIDIA_L40S-24Q"),
		// Not published (yet): neither an mdev nor a PCI entry.
		node("waiting", "", "nvidia.com/NVIDIA_L40S-12Q", "nvidia.com/NVIDIA_A10-8Q"),
	})
	assert.Empty(t, problems)
	require.Len(t, mdev, 1)
	assert.Equal(t, "NVIDIA A10-4Q", mdev[0].MDEVNameSelector)
	assert.Equal(t, "nvidia.com/NVIDIA_A10-4Q", mdev[0].ResourceName)
	require.Len(t, pci, 1)
	assert.Equal(t, "10DE:26B9", pci[0].PCIVendorSelector, "the VF's device id, normalised")
	assert.Equal(t, "nvidia.com/NVIDIA_L40S-24Q", pci[0].ResourceName)
	assert.True(t, pci[0].ExternalResourceProvider && mdev[0].ExternalResourceProvider)
}

// End to end through the API server: SR-IOV VF vGPUs become PCI entries
// and turn KubeVirt's own mdev handling off; mdev vGPUs become mediated
// devices; a node that has not published yet adds nothing until it does;
// each node's SandboxGPUNode counts its vGPUs of either kind.
func TestKubeVirtVGPUEntriesOfBothKinds(t *testing.T) {
	c, get := startKubeVirtTest(t, "kubevirt-vgpu", map[string]any{}, v1alpha1.WorkloadVMVGPU)
	gates := func() []string {
		g, _, _ := unstructured.NestedStringSlice(get().Object, "spec", "configuration", "developerConfiguration", "featureGates")
		return g
	}

	newNode(t, c, "kvg-sriov", nil)
	publishPermitted(t, c, "kvg-sriov", publishedSRIOV)
	setCapacity(t, c, "kvg-sriov", map[string]int64{"nvidia.com/NVIDIA_L40S-24Q": 2})
	testutil.Eventually(t, wait, "the VF vGPU as a PCI entry", func() bool {
		return assert.ObjectsAreEqual([]string{"nvidia.com/NVIDIA_L40S-24Q"}, resourceNames(t, get(), "pciHostDevices"))
	})
	assert.Empty(t, resourceNames(t, get(), "mediatedDevices"), "never an mdev entry for a VF type")
	assert.Contains(t, gates(), MDEVGate, "vGPUs of the device manager, VFs too: KubeVirt creates no mdevs")
	pci, _, _ := unstructured.NestedSlice(get().Object, "spec", "configuration", "permittedHostDevices", "pciHostDevices")
	assert.Equal(t, map[string]any{"pciVendorSelector": "10DE:26B9", "resourceName": "nvidia.com/NVIDIA_L40S-24Q", "externalResourceProvider": true}, pci[0])

	newNode(t, c, "kvg-mdev", nil)
	publishPermitted(t, c, "kvg-mdev", publishedMdev)
	setCapacity(t, c, "kvg-mdev", map[string]int64{"nvidia.com/NVIDIA_A10-4Q": 6})
	newNode(t, c, "kvg-waiting", nil)
	setCapacity(t, c, "kvg-waiting", map[string]int64{"nvidia.com/NVIDIA_L40S-12Q": 4})
	testutil.Eventually(t, wait, "the mdev type as a mediated device", func() bool {
		return assert.ObjectsAreEqual([]string{"nvidia.com/NVIDIA_A10-4Q"}, resourceNames(t, get(), "mediatedDevices"))
	})
	md, _, _ := unstructured.NestedSlice(get().Object, "spec", "configuration", "permittedHostDevices", "mediatedDevices")
	assert.Equal(t, map[string]any{"mdevNameSelector": "NVIDIA A10-4Q", "resourceName": "nvidia.com/NVIDIA_A10-4Q", "externalResourceProvider": true}, md[0])
	assert.Equal(t, []string{"nvidia.com/NVIDIA_L40S-24Q"}, resourceNames(t, get(), "pciHostDevices"), "nothing guessed for the unpublished node")
	assert.Equal(t, `["mdev|nvidia.com/NVIDIA_A10-4Q|NVIDIA A10-4Q","pci|nvidia.com/NVIDIA_L40S-24Q|10DE:26B9"]`, get().GetAnnotations()[names.ManagedPermittedAnnotation])
	assert.Equal(t, 1, countOf(gates(), MDEVGate), "the gate once")

	publishPermitted(t, c, "kvg-waiting", `{"pciHostDevices":[{"pciVendorSelector":"10DE:26B9","resourceName":"nvidia.com/NVIDIA_L40S-12Q"}]}`)
	testutil.Eventually(t, wait, "its entry once published", func() bool {
		return assert.ObjectsAreEqual([]string{"nvidia.com/NVIDIA_L40S-12Q", "nvidia.com/NVIDIA_L40S-24Q"}, resourceNames(t, get(), "pciHostDevices"))
	})

	for node, n := range map[string]int32{"kvg-sriov": 2, "kvg-mdev": 6, "kvg-waiting": 4} {
		st := waitState(t, c, node, "vGPUs counted", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.VGPUs == n })
		assert.Zero(t, st.Status.BoundToVFIO, node)
		assert.Zero(t, st.Status.GPUs, "%s: vGPUs are not passthrough GPUs", node)
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
