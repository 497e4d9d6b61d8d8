package operands

import (
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// Service accounts of the operand pods: one per operand (created by the
// chart and manifests/operator/operator.yaml), so that each identity has
// only its own RBAC; the admission policy names them all.
const (
	// DiscoveryServiceAccount runs the GPU discovery agent: it may read
	// Nodes and patch only its own Node's sandbox-gpu.io/gpu.* labels.
	DiscoveryServiceAccount = "sandbox-gpu-discovery"
)

// ServiceAccountName is the service account an operand's pods run as:
// sandbox-gpu-<operand> (the DaemonSet's name), sandbox-gpu-discovery for
// the GPU discovery agent.
func ServiceAccountName(operand string) string {
	if operand == names.GPUDiscovery {
		return DiscoveryServiceAccount
	}
	return DaemonSetName(operand)
}

// ServiceAccounts lists every operand's service account, sorted.
func ServiceAccounts() []string {
	out := make([]string, 0, len(builders))
	for _, op := range Names() {
		out = append(out, ServiceAccountName(op))
	}
	slices.Sort(out)
	return out
}

// APIClients are the operands that talk to the API server and so get a
// token; every other operand's pods have none. The validator and the vGPU
// device manager watch and patch their own Node (the vGPU device manager
// also creates Events), the release daemons publish their report on it,
// the discovery agent labels it, the VFIO manager follows its Node's
// sandbox-gpu.io/vm-gpus annotation and reports the split there.
func APIClients() []string {
	return []string{names.GPUDiscovery, names.Validator, names.VGPUDeviceManager, names.VFIOManager,
		names.ReleaseOperand(names.VFIOManager), names.ReleaseOperand(names.VGPUDeviceManager)}
}

// pullWith sets the pull secrets (the operator's, then the policy's, then
// the operand's own, each once) and the pull policy (the policy's over the
// operator's) of the pod.
func pullWith(ds *appsv1.DaemonSet, p *v1alpha1.SandboxGPUPolicySpec, o Options, own ...string) {
	c := &ds.Spec.Template.Spec.Containers[0]
	c.ImagePullPolicy = o.ImagePullPolicy
	if p.ImagePullPolicy != "" {
		c.ImagePullPolicy = p.ImagePullPolicy
	}
	var refs []corev1.LocalObjectReference
	var seen []string
	for _, name := range slices.Concat(o.ImagePullSecrets, p.ImagePullSecrets, own) {
		if name == "" || slices.Contains(seen, name) {
			continue
		}
		seen = append(seen, name)
		refs = append(refs, corev1.LocalObjectReference{Name: name})
	}
	ds.Spec.Template.Spec.ImagePullSecrets = refs
}

// discovery shapes the GPU discovery agent (sandbox-gpu-validator
// discover): on every Linux node whatever its taints, not selected by a
// deploy label; non-root (the validator image's user) with sysfs
// read-only; with its own service account's token, since it labels its
// Node.
func discovery(ds *appsv1.DaemonSet, _ *v1alpha1.SandboxGPUPolicySpec, _ Options) {
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	c.Args = []string{"discover", "--health-addr=" + names.HealthAddr("", names.GPUDiscoveryPort)}
	spec.NodeSelector = map[string]string{corev1.LabelOSStable: "linux"}
	spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	nonRoot := true
	spec.SecurityContext.RunAsNonRoot = &nonRoot
	mount(ds, "sys", "/sys", true)
	probe(c, "/readyz", names.GPUDiscoveryPort)
}
