// Package names holds every name that more than one part of sandbox-gpu
// relies on: node labels and annotations (ours and the NVIDIA GPU
// Operator's that users already know), the operand names, and the files the
// node daemons exchange on the host. Keeping them in one leaf package means
// the operator, the node daemons and the CLI can never disagree, and no
// node binary has to import the operator to learn a label.
package names

import (
	"path/filepath"
	"strings"
)

// Domain is the product's own label and annotation domain.
const Domain = "sandbox-gpu.io"

// Node labels users set or read, the same as NVIDIA GPU Operator's.
const (
	// WorkloadConfigLabel selects a GPU node's workload config:
	// container, vm-passthrough or vm-vgpu.
	WorkloadConfigLabel = "nvidia.com/gpu.workload.config"
	// VGPUConfigLabel selects a vm-vgpu node's entry of the vGPU config.
	VGPUConfigLabel = "nvidia.com/vgpu.config"
	// VGPUConfigStateLabel reports the vGPU device manager's progress:
	// pending, success or failed.
	VGPUConfigStateLabel = "nvidia.com/vgpu.config.state"
)

// Labels and annotations under our own domain.
const (
	// GPUPresentLabel marks a node with an NVIDIA GPU: the GPU discovery
	// agent sets it from sysfs, so no Node Feature Discovery is needed.
	GPUPresentLabel = Domain + "/gpu.present"
	// GPUCountLabel is the number of NVIDIA GPUs (physical functions) the
	// GPU discovery agent found on the node.
	GPUCountLabel = Domain + "/gpu.count"
	// GPUDriverLabel is which of NVIDIA's host drivers the node's kernel
	// runs, as the GPU discovery agent read it from sysfs
	// (host.NVIDIADriver): datacenter, vgpu-host or none.
	GPUDriverLabel = Domain + "/gpu.driver"
	// GPUDriverLabel's values (host.NVIDIADriver's kinds).
	GPUDriverDataCentre = "datacenter"
	GPUDriverVGPUHost   = "vgpu-host"
	GPUDriverNone       = "none"
	// GPULabelPrefix starts every label the GPU discovery agent owns (and
	// the only labels the admission policy lets it change).
	GPULabelPrefix = Domain + "/gpu."
	// DeployPrefix starts every deploy label: <prefix><operand>=true.
	DeployPrefix = Domain + "/deploy."
	// ReleasePrefix starts every release label: <prefix><operand>=true
	// runs that operand in release mode on the node (its release
	// DaemonSet), which returns the host state the operand made: GPUs back
	// to their host driver, vGPUs removed. The operator sets it while a
	// node leaves a config, in the same write that removes the operand's
	// deploy label.
	ReleasePrefix = Domain + "/release."
	// ReleaseReportPrefix starts the annotation a release daemon publishes
	// on its own Node: <prefix><operand> = JSON (wire.ReleaseReport): done,
	// or what stays and why. The operator reads it and removes it once the
	// release label is gone.
	ReleaseReportPrefix = Domain + "/release-report."
	// PermittedAnnotation on a Node carries, as JSON, the KubeVirt
	// permittedHostDevices the node's KubeVirt device plugin derived for
	// what it advertises; the validator publishes it, the operator merges
	// every node's into the KubeVirt CR.
	PermittedAnnotation = Domain + "/kubevirt-permitted-host-devices"
	// ManagedPermittedAnnotation on a KubeVirt CR lists the
	// permittedHostDevices entries the operator added (and may remove).
	ManagedPermittedAnnotation = Domain + "/managed-permitted-host-devices"
	// SpecHashAnnotation on an operand DaemonSet is the hash of the spec
	// the operator built, so an unchanged operand costs no write.
	SpecHashAnnotation = Domain + "/spec-hash"
	// VMGPUsAnnotation on a vm-passthrough Node says which of its GPUs go
	// to VMs (vfio-pci); the rest stay on their host driver for
	// containers. The admin sets it with kubectl: absent or "all" (every
	// GPU), a count ("2"), GPU indices as nvidia-smi numbers them
	// ("index:0,2") or a model ("model:2236", "model:A10"). The VFIO
	// manager reads it on its own Node (vfio-manager daemon
	// --vm-gpus-from-node).
	VMGPUsAnnotation = Domain + "/vm-gpus"
	// VMGPUsReportAnnotation is where the VFIO manager reports, as JSON
	// (wire.SplitReport), how the node's GPUs split: which are the
	// VM and container GPUs, and those it could not move yet and why.
	VMGPUsReportAnnotation = Domain + "/vm-gpus-report"
	// RequestAnnotation lets pods of allowed namespaces ask the NRI plugin
	// for GPUs by annotation (monitoring agents).
	RequestAnnotation = Domain + "/gpu-request"
)

// The kubelet's PodResources API: its folder and socket on a node (the
// default of every --pod-resources-socket flag, the folder operands mount).
const (
	PodResourcesDir    = "/var/lib/kubelet/pod-resources"
	PodResourcesSocket = PodResourcesDir + "/kubelet.sock"
)

// Labels of the operand DaemonSets and their pods.
const (
	OperandLabel = "app.kubernetes.io/name"
	PartOfLabel  = "app.kubernetes.io/part-of"
	PartOf       = "sandbox-gpu"
)

// Operands: the node daemons the operator deploys.
const (
	NRIPlugin            = "nri-plugin"
	VFIOManager          = "vfio-manager"
	KubeVirtDevicePlugin = "kubevirt-device-plugin"
	KataDevicePlugin     = "kata-device-plugin"
	Validator            = "validator"
	VGPUManager          = "vgpu-manager"
	VGPUDeviceManager    = "vgpu-device-manager"
	// NVIDIADevicePlugin is NVIDIA's own k8s-device-plugin (its image,
	// not ours): it advertises nvidia.com/gpu on the nodes where
	// containers get GPUs, for the NRI plugin to inject.
	NVIDIADevicePlugin = "nvidia-device-plugin"
	// GPUDiscovery labels its own Node from sysfs (GPUPresentLabel,
	// GPUCountLabel, GPUDriverLabel). It runs on every Linux node, not by deploy label.
	GPUDiscovery = "gpu-discovery"
)

// Operands lists every operand the operator manages.
func Operands() []string {
	return []string{NRIPlugin, NVIDIADevicePlugin, VFIOManager, KubeVirtDevicePlugin, KataDevicePlugin, Validator, VGPUManager, VGPUDeviceManager, GPUDiscovery,
		ReleaseOperand(VFIOManager), ReleaseOperand(VGPUDeviceManager)}
}

// DeployLabel is the node label that selects an operand's DaemonSet.
func DeployLabel(operand string) string { return DeployPrefix + operand }

// ReleaseLabel is the node label that selects an operand's release
// DaemonSet.
func ReleaseLabel(operand string) string { return ReleasePrefix + operand }

// ReleaseReportAnnotation is the annotation an operand's release daemon
// publishes on its Node.
func ReleaseReportAnnotation(operand string) string { return ReleaseReportPrefix + operand }

// ReleaseOperand is the name of an operand's release DaemonSet operand
// (its pods' OperandLabel): vfio-manager-release.
func ReleaseOperand(operand string) string { return operand + "-release" }

// Files the node daemons share on the host. Each lives in the folder of
// the one operand that writes it, RunDir/<writer> (WriterDir): only that
// operand's DaemonSets (it and its release) mount the folder writable,
// every reader mounts it read-only, so no pod can plant a file (a link, a
// FIFO) where a privileged daemon writes, reads or locks:
//
//	/run/sandbox-gpu/vfio-manager/            vfio-manager.ready, vfio.lock
//	/run/sandbox-gpu/vgpu-device-manager/     vgpu-device-manager.ready, .pause, vgpu.lock, vgpu-types.json
//	/run/sandbox-gpu/kubevirt-device-plugin/  kubevirt-permitted-host-devices.json
const (
	// RunDir holds the writers' folders.
	RunDir = "/run/sandbox-gpu"
	// VFIOReadyFile is the VFIO manager's readiness file.
	VFIOReadyFile = "vfio-manager.ready"
	// VFIOLockFile is the host-wide lock every process that rebinds PCI
	// functions holds: the daemon and a host-side vfio-manager alike
	// (internal/hostlock locks its folder).
	VFIOLockFile = "vfio.lock"
	// VGPULockFile is the vGPU device manager's host-wide lock: a pass of
	// the node daemon holds it, its release mode holds it for its life, so
	// an old and a new pod (or the daemon and its release) never change
	// vGPUs at once.
	VGPULockFile = "vgpu.lock"
	// PermittedFile is where the KubeVirt device plugin keeps the
	// permittedHostDevices of what it advertises.
	PermittedFile = "kubevirt-permitted-host-devices.json"
	// VGPUReadyFile is the vGPU device manager's report of the config it
	// applied (read by the validator).
	VGPUReadyFile = "vgpu-device-manager.ready"
	// VGPUPauseFile exists while the vGPU device manager changes a GPU's
	// vGPUs: the KubeVirt device plugin then advertises none of them, so
	// the kubelet never sees a half-built set.
	VGPUPauseFile = "vgpu-device-manager.pause"
	// VGPUTypesFile is the vGPU device manager's memory of the names of
	// the vendor-specific VFIO type ids it has seen (wire.VGPUTypeNames):
	// a full card lists none, so a restarted manager names its vGPUs from
	// it.
	VGPUTypesFile = "vgpu-types.json"
)

// Writer names the operand that writes one of the shared files ("" for a
// file that is none of them).
func Writer(file string) string {
	switch file {
	case VFIOReadyFile, VFIOLockFile:
		return VFIOManager
	case VGPUReadyFile, VGPUPauseFile, VGPULockFile, VGPUTypesFile:
		return VGPUDeviceManager
	case PermittedFile:
		return KubeVirtDevicePlugin
	}
	return ""
}

// Writers lists the operands that write shared files, each in its own
// WriterDir.
func Writers() []string { return []string{VFIOManager, VGPUDeviceManager, KubeVirtDevicePlugin} }

// WriterDir is a writer's own folder under RunDir.
func WriterDir(writer string) string { return filepath.Join(RunDir, writer) }

// RunPath returns the path of one of the shared files: in its writer's
// folder under RunDir.
func RunPath(file string) string { return RunPathIn(RunDir, file) }

// RunPathIn is RunPath under another run folder (a test's node).
func RunPathIn(runDir, file string) string { return filepath.Join(runDir, Writer(file), file) }

// ContainerGPUResource reports NVIDIA's resources for ordinary containers
// (nvidia.com/gpu, its nvidia.com/gpu.* variants such as time-sliced
// nvidia.com/gpu.shared, and MIG's nvidia.com/mig-*), whose IDs are GPU
// UUIDs or indexes, and whose CDI kinds the NRI plugin and the runtime
// resolve: never a VM resource.
func ContainerGPUResource(name string) bool {
	return name == "nvidia.com/gpu" || strings.HasPrefix(name, "nvidia.com/gpu.") || strings.HasPrefix(name, "nvidia.com/mig-")
}
