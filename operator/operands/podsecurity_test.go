package operands

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// TestPodResourcesReadOnly: every operand that asks the kubelet's
// PodResources mounts its folder read-only (a unix socket's connect needs
// the socket's permission, not a writable mount).
func TestPodResourcesReadOnly(t *testing.T) {
	var users []string
	for _, op := range Names() {
		ds, _ := build(t, op, &v1alpha1.SandboxGPUPolicySpec{}, opts)
		if m, ok := hostPaths(ds)[PodResourcesDir]; ok {
			users = append(users, op)
			assert.Equal(t, PodResourcesDir+":ro", m, op)
		}
	}
	assert.ElementsMatch(t, []string{names.NRIPlugin, names.VFIOManager, names.VGPUDeviceManager,
		names.ReleaseOperand(names.VFIOManager), names.ReleaseOperand(names.VGPUDeviceManager)}, users)
}

// TestNonRootWhereTheImageAllows: the operands whose image runs as nonroot
// (hack/imagebuild's runAsRoot lists the others and why) refuse to start
// as root; the others need root: sysfs writes (VFIO and vGPU managers,
// their releases, NVIDIA's vGPU host driver), the kubelet's root-owned
// device-plugins folder (both device plugins, NVIDIA's), containerd's
// root-only NRI socket (the NRI plugin).
func TestNonRootWhereTheImageAllows(t *testing.T) {
	var nonRoot []string
	for _, op := range Names() {
		ds, _ := build(t, op, &v1alpha1.SandboxGPUPolicySpec{}, opts)
		if sc := ds.Spec.Template.Spec.SecurityContext; sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot {
			nonRoot = append(nonRoot, op)
		}
	}
	assert.ElementsMatch(t, []string{names.Validator, names.GPUDiscovery}, nonRoot)
}
