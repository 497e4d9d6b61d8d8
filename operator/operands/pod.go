package operands

import (
	"path"
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

// hostRootMount is a folder of a simulated host tree (Options.HostRoot):
// its volume and the root flag it is handed to.
type hostRootMount struct{ volume, dir, flag string }

func hostRootMounts() []hostRootMount {
	return []hostRootMount{{"host-sys", "sys", "--sysfs-root"}, {"host-dev", "dev", "--dev-root"}, {"host-proc", "proc", "--proc-root"}}
}

// hostRoots gives an operand that reads the host its host folders. In
// production (no Options.HostRoot) prod mounts the node's own folders as it
// always did and the binaries keep their default roots (/sys, /dev,
// /proc). With Options.HostRoot (tests) the simulated tree's sys, dev and
// proc folders are mounted at the same paths in the container (its symbolic
// links and the device paths the plugins report then resolve the same
// inside and outside) and the root flags point there; proc is read-only,
// sys and dev are writable only where the operand writes them (writable).
// The folders must exist (HostPathDirectory): a missing tree shows up as a
// pod event instead of an empty folder.
func hostRoots(ds *appsv1.DaemonSet, o Options, writable bool, prod func()) {
	if o.HostRoot == "" {
		prod()
		return
	}
	c := &ds.Spec.Template.Spec.Containers[0]
	for _, m := range hostRootMounts() {
		p := path.Join(o.HostRoot, m.dir)
		mountAt(ds, m.volume, p, corev1.HostPathDirectory, !writable || m.dir == "proc")
		c.Args = append(c.Args, m.flag+"="+p)
	}
}

// mountAt mounts the host folder p at the same path in the container.
func mountAt(ds *appsv1.DaemonSet, name, p string, t corev1.HostPathType, readOnly bool) {
	ds.Spec.Template.Spec.Volumes = append(ds.Spec.Template.Spec.Volumes, corev1.Volume{Name: name,
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: p, Type: &t}}})
	c := &ds.Spec.Template.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: p, ReadOnly: readOnly})
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
func discovery(ds *appsv1.DaemonSet, _ *v1alpha1.SandboxGPUPolicySpec, o Options) {
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	c.Args = []string{"discover", "--health-addr=" + names.HealthAddr("", names.GPUDiscoveryPort)}
	spec.NodeSelector = map[string]string{corev1.LabelOSStable: "linux"}
	spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	nonRoot := true
	spec.SecurityContext.RunAsNonRoot = &nonRoot
	hostRoots(ds, o, false, func() { mount(ds, "sys", "/sys", true) })
	probe(c, "/readyz", names.GPUDiscoveryPort)
}
