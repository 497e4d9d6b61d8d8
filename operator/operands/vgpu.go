package operands

import (
	"path"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// The vGPU device manager's config: a ConfigMap in the operand namespace
// (spec.vgpuDeviceManager.config.name, or the one the operator keeps with
// the built-in default config) mounted at VGPUConfigDir.
const (
	// DefaultVGPUConfigMap is the ConfigMap the operator keeps with the
	// built-in default config when the policy names none.
	DefaultVGPUConfigMap = "sandbox-gpu-vgpu-config"
	// VGPUConfigKey is the config file's key in the ConfigMap.
	VGPUConfigKey = "config.yaml"
	// VGPUConfigDir is where the ConfigMap is mounted; the manager watches
	// the folder (the kubelet updates a ConfigMap mount by renaming).
	VGPUConfigDir = "/etc/vgpu-config"
	// PodResourcesDir is the kubelet's PodResources socket folder: vGPUs
	// allocated to pods count as in use.
	PodResourcesDir = names.PodResourcesDir
)

// VGPUConfigMap is the ConfigMap the policy's vGPU device manager reads.
func VGPUConfigMap(p *v1alpha1.SandboxGPUPolicySpec) string {
	if n := p.VGPUDeviceManager.Config.Name; n != "" {
		return n
	}
	return DefaultVGPUConfigMap
}

// vgpuDeviceManager shapes `vgpu-device-manager run`: it follows its own
// Node's nvidia.com/vgpu.config label (the policy's default without one),
// writes that Node's nvidia.com/vgpu.config.state label and events (so it
// has a token; the admission policy limits it to its own Node), creates and
// removes vGPUs in sysfs (privileged, /sys and /dev writable), finds their
// users in every process's open files (host PID namespace) and in the
// kubelet's PodResources (read-only), and keeps its pause and ready files in
// its own run folder for the KubeVirt device plugin and the validator.
// Where the operator runs the vGPU host driver, it reads that driver's
// NVML from its root (read-only).
func vgpuDeviceManager(ds *appsv1.DaemonSet, p *v1alpha1.SandboxGPUPolicySpec, _ Options) {
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	def := p.VGPUDeviceManager.Config.Default
	if def == "" {
		def = vgpuconfig.DefaultName
	}
	c.Args = []string{"run", "--config=" + path.Join(VGPUConfigDir, VGPUConfigKey), "--node-name=$(NODE_NAME)",
		"--default=" + def, "--health-addr=" + names.HealthAddr("", names.VGPUDeviceManagerPort)}
	vgpuHost(ds)
	mount(ds, "pod-resources", PodResourcesDir, true)
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "vgpu-config", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: VGPUConfigMap(p)}}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "vgpu-config", MountPath: VGPUConfigDir, ReadOnly: true})
	if p.VGPUManager.IsEnabled() {
		// NVML names the vGPU type ids no driver list and no memory name
		// (a full card in a fresh run folder): the vGPU host driver
		// container's root, which it rbind-mounts at VGPUDriverRoot,
		// read-only; HostToContainer, so a driver container started again
		// is seen. The manager starts once that container is ready, so
		// the folder is there. A host-installed driver's libraries are not
		// mounted (the host's library folders are no operand's): the
		// manager names from the driver's lists and its memory alone.
		c.Args = append(c.Args, "--driver-root="+VGPUDriverRoot)
		dir, prop := corev1.HostPathDirectory, corev1.MountPropagationHostToContainer
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "driver-root", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: VGPUDriverRoot, Type: &dir}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "driver-root", MountPath: VGPUDriverRoot, ReadOnly: true, MountPropagation: &prop})
	}
	probe(c, "/readyz", names.VGPUDeviceManagerPort)
}

// VGPUDriverRoot is where NVIDIA's vGPU host driver container (vgpuManager)
// rbind-mounts its root on the host, libnvidia-ml.so.1 included.
const VGPUDriverRoot = "/run/nvidia/driver"

// vgpuHost shapes what the vGPU device manager and its release share of
// the host: its processes' open files (host PID namespace), sysfs and /dev
// writable, and its own run folder (names.WriterDir) for the lock, pause
// and ready files, the only pods that mount it writable.
func vgpuHost(ds *appsv1.DaemonSet) {
	ds.Spec.Template.Spec.HostPID = true
	mount(ds, "sys", "/sys", false)
	mount(ds, "dev", "/dev", false)
	mount(ds, "run", names.WriterDir(names.VGPUDeviceManager), false)
}

// vgpuManager shapes NVIDIA's vGPU host driver container (vgpu-manager,
// built from NVIDIA/gpu-driver-container's vgpu-manager/<os>/nvidia-driver
// script) as the GPU Operator deploys it (assets/state-vgpu-manager/
// 0500_daemonset.yaml): `nvidia-driver init` installs the vgpu-kvm driver
// into the container, loads nvidia and nvidia_vgpu_vfio (modprobe from the
// container's own /lib/modules), starts nvidia-vgpud and nvidia-vgpu-mgr,
// rbind-mounts its root at /run/nvidia/driver (so /run/nvidia is shared
// with the host, Bidirectional), sets the firmware search path under it,
// and enables the SR-IOV VFs of every GPU (sriov-manage -e ALL). It runs
// privileged, in the host's PID and IPC namespaces, with a writable root
// (the installer writes it), and takes none of our root flags. NVIDIA's DaemonSet has no probe (the
// GPU Operator's validator gates the next operands); ours: the startup
// probe passes once the daemon runs, the modules are loaded, the driver
// root is mounted and every SR-IOV capable GPU on the nvidia driver has
// its VFs, i.e. the script is done with the VFs; the readiness probe is
// the script's own liveness check (nvidia-vgpu-mgr runs) and the modules.
// The vGPU device manager starts on a node only once this pod is ready
// there (workload.Prerequisite).
func vgpuManager(ds *appsv1.DaemonSet, _ *v1alpha1.SandboxGPUPolicySpec, _ Options) {
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	spec.HostPID, spec.HostIPC = true, true
	c.Command, c.Args = []string{"nvidia-driver"}, []string{"init"}
	writable := false
	c.SecurityContext.ReadOnlyRootFilesystem = &writable
	c.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Level: "s0"}
	bidi := corev1.MountPropagationBidirectional
	dir, dirOrCreate := corev1.HostPathDirectory, corev1.HostPathDirectoryOrCreate
	for _, m := range []struct {
		name, host, at string
		typ            *corev1.HostPathType
		readOnly       bool
		prop           *corev1.MountPropagationMode
	}{
		{"run-nvidia", "/run/nvidia", "/run/nvidia", &dirOrCreate, false, &bidi},
		{"host-os-release", "/etc/os-release", "/host-etc/os-release", nil, true, nil},
		{"vfio", "/dev/vfio", "/dev/vfio", &dirOrCreate, false, nil},
		{"cgroup", "/sys/fs/cgroup", "/sys/fs/cgroup", &dir, false, nil},
		{"var-log", "/var/log", "/var/log", &dir, false, nil},
		{"dev-log", "/dev/log", "/dev/log", nil, false, nil},
		{"firmware-search-path", "/sys/module/firmware_class/parameters/path", "/sys/module/firmware_class/parameters/path", nil, false, nil},
		{"nv-firmware", "/run/nvidia/driver/lib/firmware", "/lib/firmware", &dirOrCreate, false, nil},
	} {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: m.name,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.host, Type: m.typ}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: m.name, MountPath: m.at, ReadOnly: m.readOnly, MountPropagation: m.prop})
	}
	exec := func(script string) corev1.ProbeHandler {
		return corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", script}}}
	}
	// The driver installs in minutes (packages, the .run installer, a 15 s
	// wait before the VFs): as the GPU Operator's driver container, up to
	// 20 minutes before the kubelet restarts it.
	c.StartupProbe = &corev1.Probe{ProbeHandler: exec(vgpuManagerRunning + " && findmnt -r /run/nvidia/driver >/dev/null && " + vfsEnabled),
		InitialDelaySeconds: 30, PeriodSeconds: 10, TimeoutSeconds: 10, FailureThreshold: 120}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: exec(vgpuManagerRunning), PeriodSeconds: 30, TimeoutSeconds: 10}
}

// Shell checks of the vGPU host driver's probes (the image has sh, pgrep
// and findmnt: NVIDIA's script uses them).
const (
	vgpuManagerRunning = "test -e /sys/module/nvidia/refcnt && test -e /sys/module/nvidia_vgpu_vfio/refcnt && pgrep nvidia-vgpu-mgr >/dev/null"
	// Every physical function on nvidia that can have VFs has them.
	vfsEnabled = `for d in /sys/bus/pci/drivers/nvidia/0000:*; do t=$(cat "$d/sriov_totalvfs" 2>/dev/null) || continue; ` +
		`[ "$t" = 0 ] || [ "$(cat "$d/sriov_numvfs")" != 0 ] || exit 1; done`
)

// bareDriverVersion is a vGPU host driver version without an OS suffix:
// the GPU Operator appends the nodes' OS to such a version.
var bareDriverVersion = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)

// VGPUManagerImage is the vGPU host driver's image, as the GPU Operator
// makes it: <repository>/<image>:<version>, with osTag (ubuntu22.04)
// appended to a bare driver version (550.90.05-ubuntu22.04); a sha256:
// version is a digest (@sha256:...), and Digest wins over any version.
// Without a repository and version the image is a whole reference. "" when
// no image is given.
func VGPUManagerImage(m v1alpha1.VGPUManagerSpec, osTag string) string {
	if m.Image == "" {
		return ""
	}
	ref := m.Image
	if m.Repository != "" {
		ref = strings.TrimSuffix(m.Repository, "/") + "/" + m.Image
	}
	switch v := m.Version; {
	case m.Digest != "":
		ref += "@" + m.Digest // the digest wins over any version
	case v == "":
	case strings.HasPrefix(v, "sha256:"):
		ref += "@" + v
	case osTag != "" && bareDriverVersion.MatchString(v):
		ref += ":" + v + "-" + osTag
	default:
		ref += ":" + v
	}
	return ref
}
