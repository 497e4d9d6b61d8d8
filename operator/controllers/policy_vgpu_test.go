package controllers

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

func vgpuConfigMap(c client.Client) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := c.Get(context.Background(), client.ObjectKey{Namespace: operandNS, Name: operands.DefaultVGPUConfigMap}, cm)
	return cm, err
}

// Without a ConfigMap named in the policy the operator keeps one with the
// built-in vGPU config, owned by the policy, written only on change and put
// back when edited; naming one's own removes it and points the vGPU device
// manager there.
func TestDefaultVGPUConfigMap(t *testing.T) {
	c := startTest(t, newClock(), v1alpha1.WorkloadVMVGPU)
	ctx := context.Background()
	var cm *corev1.ConfigMap
	testutil.Eventually(t, wait, "the default vGPU ConfigMap", func() bool {
		var err error
		cm, err = vgpuConfigMap(c)
		return err == nil
	})
	assert.Equal(t, string(vgpuconfig.DefaultYAML()), cm.Data[operands.VGPUConfigKey])
	_, err := vgpuconfig.Parse("configmap", []byte(cm.Data[operands.VGPUConfigKey]))
	require.NoError(t, err, "the vGPU device manager can read it")
	require.Len(t, cm.OwnerReferences, 1)
	assert.Equal(t, "SandboxGPUPolicy", cm.OwnerReferences[0].Kind, "owned by the policy: helm uninstall takes it")
	testutil.Eventually(t, wait, "the DaemonSet mounts it", func() bool {
		ds, ok := daemonSets(t, c)[names.VGPUDeviceManager]
		return ok && hasConfigMapVolume(ds.Spec.Template.Spec, operands.DefaultVGPUConfigMap)
	})

	// Steady state: no write; an edit is put back.
	rv := cm.ResourceVersion
	setPolicy(t, c, sandboxOn(v1alpha1.WorkloadVMVGPU), func(s *v1alpha1.SandboxGPUPolicySpec) { s.Kata.RuntimeClassName = "touch" })
	waitPolicyObserved(t, c)
	cm, err = vgpuConfigMap(c)
	require.NoError(t, err)
	assert.Equal(t, rv, cm.ResourceVersion, "no write without a change")
	cm.Data[operands.VGPUConfigKey] = "version: v1\n"
	require.NoError(t, c.Update(ctx, cm))
	testutil.Eventually(t, wait, "the edit put back", func() bool {
		cm, err := vgpuConfigMap(c)
		return err == nil && cm.Data[operands.VGPUConfigKey] == string(vgpuconfig.DefaultYAML())
	})

	// The policy names its own ConfigMap (and default entry).
	setPolicy(t, c, sandboxOn(v1alpha1.WorkloadVMVGPU), func(s *v1alpha1.SandboxGPUPolicySpec) {
		s.VGPUDeviceManager.Config = v1alpha1.VGPUConfig{Name: "site-vgpu-config", Default: "A10-4Q"}
	})
	testutil.Eventually(t, wait, "the DaemonSet follows the policy", func() bool {
		ds, ok := daemonSets(t, c)[names.VGPUDeviceManager]
		return ok && hasConfigMapVolume(ds.Spec.Template.Spec, "site-vgpu-config") &&
			contains(ds.Spec.Template.Spec.Containers[0].Args, "--default=A10-4Q")
	})
	testutil.Eventually(t, wait, "the default ConfigMap removed", func() bool {
		_, err := vgpuConfigMap(c)
		return apierrors.IsNotFound(err)
	})
}

func hasConfigMapVolume(spec corev1.PodSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == name {
			return true
		}
	}
	return false
}

func waitPolicyObserved(t *testing.T, c client.Client) {
	t.Helper()
	testutil.Eventually(t, wait, "policy reconciled", func() bool {
		var p v1alpha1.SandboxGPUPolicy
		err := c.Get(context.Background(), client.ObjectKey{Name: PolicyName}, &p)
		return err == nil && p.Status.ObservedGeneration == p.Generation
	})
}

// The vGPU host driver's image is named as the GPU Operator names it: the
// driver version with the vm-vgpu nodes' OS (NFD's os_release labels)
// appended, following the nodes.
func TestVGPUManagerImageFollowsTheNodesOS(t *testing.T) {
	c := startTest(t, newClock(), v1alpha1.WorkloadContainer, vgpuManagerOn)
	image := func() string {
		ds, ok := daemonSets(t, c)[names.VGPUManager]
		if !ok {
			return ""
		}
		return ds.Spec.Template.Spec.Containers[0].Image
	}
	testutil.Eventually(t, wait, "no OS known: the version as given", func() bool {
		return image() == "nvcr.io/example-org/vgpu/vgpu-manager:550.90.05"
	})
	newNode(t, c, "n-os-vgpu", map[string]string{names.WorkloadConfigLabel: v1alpha1.WorkloadVMVGPU,
		nfdOSIDLabel: "ubuntu", nfdOSVersionLabel: "22.04"})
	newNode(t, c, "n-os-container", map[string]string{nfdOSIDLabel: "rhel", nfdOSVersionLabel: "9.4"})
	testutil.Eventually(t, wait, "the vm-vgpu node's OS", func() bool {
		return image() == "nvcr.io/example-org/vgpu/vgpu-manager:550.90.05-ubuntu22.04"
	})
	setNodeLabel(t, c, "n-os-vgpu", nfdOSVersionLabel, "24.04") // upgraded
	testutil.Eventually(t, wait, "the upgraded OS", func() bool {
		return image() == "nvcr.io/example-org/vgpu/vgpu-manager:550.90.05-ubuntu24.04"
	})
	ds := daemonSets(t, c)[names.VGPUManager]
	assert.Equal(t, map[string]string{names.DeployLabel(names.VGPUManager): "true"}, ds.Spec.Template.Spec.NodeSelector)
	assert.True(t, metav1.IsControlledBy(&ds, policyObject(t)))
}
