package operands

import (
	appsv1 "k8s.io/api/apps/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// PodResourcesSocket is the kubelet's PodResources socket in
// PodResourcesDir.
const PodResourcesSocket = names.PodResourcesSocket

// vfioManager shapes what the VFIO manager and its release share: the
// vendor, the host's open files (host PID namespace) and network
// interfaces (host network; its listener on the loopback only), sysfs and
// /dev writable, its own run folder (names.WriterDir, which only it and its
// release mount writable) for the ready and lock files, the kernel's modules
// (modules.alias), and the
// kubelet's PodResources (read-only: a function allocated to a pod that
// has not opened it yet counts as in use), its /readyz as the probe.
func vfioManager(ds *appsv1.DaemonSet, p *v1alpha1.SandboxGPUPolicySpec, port int32) {
	c := &ds.Spec.Template.Spec.Containers[0]
	if v := p.VFIOManager.Vendor; v != "" {
		c.Args = append(c.Args, "--vendor="+v)
	}
	for _, class := range p.VFIOManager.PCIClasses {
		c.Args = append(c.Args, "--class="+class)
	}
	c.Args = append(c.Args, "--pod-resources-socket="+PodResourcesSocket)
	ds.Spec.Template.Spec.HostPID = true // in-use checks read every process's open files
	ds.Spec.Template.Spec.HostNetwork = true
	mount(ds, "sys", "/sys", false)
	mount(ds, "dev", "/dev", false)
	mount(ds, "run", names.WriterDir(names.VFIOManager), false)
	mount(ds, "modules", "/lib/modules", true)
	mount(ds, "pod-resources", PodResourcesDir, true)
	loopbackProbe(c, "/readyz", port)
}

// vfioRelease shapes `vfio-manager daemon --release`: every function of
// the vendor back to its host driver, ready once none is left on vfio; it
// publishes its report on its own Node (a token, the node name).
func vfioRelease(ds *appsv1.DaemonSet, p *v1alpha1.SandboxGPUPolicySpec, _ Options) {
	c := &ds.Spec.Template.Spec.Containers[0]
	c.Args = []string{"daemon", "--release", "--ready-dir=" + names.WriterDir(names.VFIOManager), "--health-addr=" + names.HealthAddr(LoopbackHost, names.VFIOReleasePort)}
	vfioManager(ds, p, names.VFIOReleasePort)
}

// vgpuRelease shapes `vgpu-device-manager run --release`: every vGPU
// removed and the VFs disabled, never one in use (processes and the
// kubelet's PodResources); no config; the report on its own Node.
func vgpuRelease(ds *appsv1.DaemonSet, _ *v1alpha1.SandboxGPUPolicySpec, _ Options) {
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	c.Args = []string{"run", "--release", "--node-name=$(NODE_NAME)", "--health-addr=" + names.HealthAddr("", names.VGPUDeviceManagerPort)}
	vgpuHost(ds)
	mount(ds, "pod-resources", PodResourcesDir, true)
	probe(c, "/readyz", names.VGPUDeviceManagerPort)
}

// IsRelease reports whether operand is a release DaemonSet's, and of
// which operand.
func IsRelease(operand string) (of string, ok bool) {
	b, found := builders[operand]
	return b.releases, found && b.releases != ""
}
