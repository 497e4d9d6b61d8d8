package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Workload configs a GPU node can run (node label nvidia.com/gpu.workload.config).
const (
	WorkloadContainer     = "container"
	WorkloadVMPassthrough = "vm-passthrough"
	WorkloadVMVGPU        = "vm-vgpu"
)

// ReleaseFinalizer is on the policy while it lives: deleting the policy
// (helm uninstall, kubectl delete) first returns every GPU the product
// moved, never one in use, and the operator removes the finalizer once
// every GPU node is released.
const ReleaseFinalizer = "sandbox-gpu.io/release-gpus"

// Sandbox modes.
const (
	ModeKubeVirt = "kubevirt"
	ModeKata     = "kata"
)

// SandboxWorkloads turns sandboxed GPU workloads on and picks how.
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'kata' || !has(self.defaultWorkload) || self.defaultWorkload != 'vm-vgpu'",message="sandboxWorkloads.defaultWorkload vm-vgpu needs mode kubevirt: Kata takes no vGPU"
type SandboxWorkloads struct {
	// Enabled turns on sandbox workloads. When off, every GPU node counts
	// as a container node and the product runs no node operand there but
	// the GPU discovery agent (and a release daemon while a node gives
	// back GPUs it moved): NVIDIA's container stack serves containers.
	// +optional
	Enabled bool `json:"enabled"`
	// Mode is the sandbox runtime: kubevirt or kata.
	// +kubebuilder:validation:Enum=kubevirt;kata
	// +kubebuilder:default=kubevirt
	// +optional
	Mode string `json:"mode,omitempty"`
	// DefaultWorkload is the config of GPU nodes without a valid
	// nvidia.com/gpu.workload.config label.
	// +kubebuilder:validation:Enum=container;vm-passthrough;vm-vgpu
	// +kubebuilder:default=container
	// +optional
	DefaultWorkload string `json:"defaultWorkload,omitempty"`
}

// OperandSpec configures one operand DaemonSet.
type OperandSpec struct {
	// Enabled deploys the operand where the node's workload config needs it.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Image overrides the operand's image.
	// +optional
	Image string `json:"image,omitempty"`
	// Args are extra container arguments.
	// +optional
	Args []string `json:"args,omitempty"`
	// Env are extra container environment variables.
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// Resources of the operand container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// IsEnabled reports Enabled, true when unset.
func (o OperandSpec) IsEnabled() bool { return o.Enabled == nil || *o.Enabled }

// VFIOManagerSpec configures the VFIO manager.
// +kubebuilder:validation:XValidation:rule="!has(self.vendor) || self.vendor.matches('^(0x)?0*10[dD][eE]$') || (has(self.allowOtherVendors) && self.allowOtherVendors)",message="vfioManager.vendor must be NVIDIA's 10de: another vendor needs vfioManager.allowOtherVendors: true and a vfioManager.pciClasses filter (the VFIO manager takes every function of the vendor, which could be a NIC or an NVMe drive)"
// +kubebuilder:validation:XValidation:rule="!has(self.vendor) || self.vendor.matches('^(0x)?0*10[dD][eE]$') || (has(self.pciClasses) && size(self.pciClasses) > 0)",message="vfioManager.pciClasses is required when vfioManager.vendor is not NVIDIA's 10de: name the PCI classes to take (03 display controllers, 0302 3D controllers)"
type VFIOManagerSpec struct {
	OperandSpec `json:",inline"`
	// NVSwitches binds NVSwitches to vfio too.
	// +optional
	NVSwitches bool `json:"nvswitches,omitempty"`
	// Vendor is the PCI vendor id whose functions are managed (hex):
	// NVIDIA's 10de unless AllowOtherVendors is set.
	// +kubebuilder:validation:Pattern=`^(0x)?[0-9a-fA-F]{1,4}$`
	// +kubebuilder:default="10de"
	// +optional
	Vendor string `json:"vendor,omitempty"`
	// AllowOtherVendors lets Vendor name a vendor other than NVIDIA; such a
	// policy must also give PCIClasses, so that the VFIO manager never
	// takes the vendor's other functions (network cards, NVMe drives).
	// +optional
	AllowOtherVendors bool `json:"allowOtherVendors,omitempty"`
	// PCIClasses limit the functions the VFIO manager takes to these PCI
	// class codes (hex prefixes of the 24-bit class: 03 display
	// controllers, 0302 3D controllers, 030000 VGA); required for a vendor
	// other than NVIDIA. Passed to the VFIO manager as --class.
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Pattern=`^([0-9a-fA-F]{2}){1,3}$`
	// +optional
	PCIClasses []string `json:"pciClasses,omitempty"`
}

// VGPUManagerSpec configures the vGPU host driver: NVIDIA's vgpu-manager
// container, which installs and loads the vGPU host driver
// (nvidia_vgpu_vfio, nvidia-vgpu-mgr) on vm-vgpu nodes. Its image lives in a
// private registry (NGC's, or one's own built from the vGPU host driver), so
// it is only deployed when an image is given, named as the GPU Operator
// names it: repository, image and version (the driver version, 550.90.05;
// the nodes' OS is appended as the GPU Operator does, 550.90.05-ubuntu22.04,
// when NFD labels them), or image alone as a whole reference.
// +kubebuilder:validation:XValidation:rule="!has(self.enabled) || !self.enabled || (has(self.image) && size(self.image) > 0 && ((has(self.repository) && size(self.repository) > 0) || self.image.contains('/')))",message="vgpuManager.image is required when vgpuManager is enabled: repository, image and version (GPU Operator style), or image as a whole reference (registry.example/nvidia/vgpu-manager:550.90.05-ubuntu22.04)"
// +kubebuilder:validation:XValidation:rule="!has(self.repository) || size(self.repository) == 0 || (has(self.version) && size(self.version) > 0) || (has(self.digest) && size(self.digest) > 0)",message="vgpuManager.version is required with vgpuManager.repository, unless vgpuManager.digest is set: the vGPU host driver version (550.90.05) or the whole image tag"
type VGPUManagerSpec struct {
	// Enabled deploys the vGPU host driver on vm-vgpu nodes (KubeVirt mode).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Repository of the image (GPU Operator style): the image is
	// <repository>/<image>:<version>.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Repository string `json:"repository,omitempty"`
	// Image name under Repository, or, without Repository, the whole image
	// reference (registry/path/name:tag or @digest).
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
	// Version is the vGPU host driver version (550.90.05), to which the
	// vm-vgpu nodes' OS (-ubuntu22.04, from Node Feature Discovery's
	// system-os_release labels) is appended, or a whole tag or a sha256:
	// digest, taken as it is.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Version string `json:"version,omitempty"`
	// Digest pins the image by content (sha256:<64 hex digits>): the image
	// is <repository>/<image>@<digest>, or <image>@<digest>, and Version is
	// not used (a tag can be moved; a digest cannot).
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	// +optional
	Digest string `json:"digest,omitempty"`
	// ImagePullSecrets name Secrets in the operand namespace to pull this
	// image with (the private registry's), in addition to the policy's and
	// the operator's.
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`
	// +optional
	Args []string `json:"args,omitempty"`
	// Env of the driver container (NVIDIA's script reads, for example,
	// DELAY_BEFORE_VF_CREATION).
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// IsEnabled reports whether the vGPU host driver is to be deployed: enabled
// and with an image (the CRD refuses enabled without one).
func (s VGPUManagerSpec) IsEnabled() bool { return s.Enabled != nil && *s.Enabled && s.Image != "" }

// VGPUDeviceManagerSpec configures the vGPU device manager.
type VGPUDeviceManagerSpec struct {
	OperandSpec `json:",inline"`
	// Config selects the vGPU configuration.
	// +optional
	Config VGPUConfig `json:"config,omitempty"`
}

// VGPUConfig names the vGPU configuration file and its default entry.
type VGPUConfig struct {
	// Name of the ConfigMap (in the operand namespace) holding config.yaml,
	// in NVIDIA vgpu-device-manager's format. Empty: the operator keeps
	// ConfigMap sandbox-gpu-vgpu-config there with the built-in default
	// config (every data-centre GPU the vGPU device manager knows).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$`
	// +optional
	Name string `json:"name,omitempty"`
	// Default is the vgpu-configs entry used when a node has no
	// nvidia.com/vgpu.config label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:default=default
	// +optional
	Default string `json:"default,omitempty"`
}

// CDI hook policies of the NRI plugin (its --cdi-hooks).
const (
	CDIHooksNVIDIA = "nvidia"
	CDIHooksNone   = "none"
	CDIHooksAny    = "any"
)

// NRIPluginSpec configures the NRI plugin.
type NRIPluginSpec struct {
	OperandSpec `json:",inline"`
	// CDIHooks are the OCI hooks a GPU CDI spec may bring into a
	// container: nvidia (only NVIDIA's toolkit hooks at their installed
	// paths, with NVIDIA's hook names, argument shapes and no env but
	// NVIDIA_CTK_DEBUG), none (specs without hooks, as generate-cdi writes
	// them), or any (trust every CDI writer's hooks). A container whose GPU
	// spec brings another hook is refused; the spec's mounts, device nodes
	// and env are checked whatever this says.
	// +kubebuilder:validation:Enum=nvidia;none;any
	// +kubebuilder:default=nvidia
	// +optional
	CDIHooks string `json:"cdiHooks,omitempty"`
}

// DevicePluginSpec configures NVIDIA's k8s-device-plugin, which the
// operator runs on the nodes where containers get GPUs (container nodes
// and the container side of mixed nodes), set up for the NRI plugin:
// device IDs are GPU UUIDs passed in NVIDIA_VISIBLE_DEVICES, and the NRI
// plugin injects the driver and the GPUs into its pod. Turn it off where
// the GPU Operator's container stack (or another install) already runs it.
type DevicePluginSpec struct {
	OperandSpec `json:",inline"`
	// DriverRoot is where the NVIDIA driver is installed on the node
	// (NVIDIA_DRIVER_ROOT): / for a host-installed driver,
	// /run/nvidia/driver for the GPU Operator's driver container.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:default="/"
	// +optional
	DriverRoot string `json:"driverRoot,omitempty"`
}

// KubeVirtSpec configures the KubeVirt integration.
type KubeVirtSpec struct {
	// ManagePermittedHostDevices keeps the KubeVirt CR's
	// permittedHostDevices in step with what the device plugins advertise
	// (entries it did not add are never removed).
	// +kubebuilder:default=true
	// +optional
	ManagePermittedHostDevices *bool `json:"managePermittedHostDevices,omitempty"`
}

// KataSpec configures the Kata integration.
type KataSpec struct {
	// RuntimeClassName is the RuntimeClass Kata GPU pods use.
	// +kubebuilder:default=kata-qemu-nvidia-gpu
	// +optional
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
}

// DrainSpec says how GPU users are moved off a node whose workload config
// changes.
type DrainSpec struct {
	// Evict pods that hold GPU resources of the old config; when false the
	// node waits until they finish.
	// +optional
	Evict bool `json:"evict,omitempty"`
	// Timeout after which a node that still has GPU users is marked failed:
	// a non-negative Go duration (10m, 90s, 1h30m).
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) >= duration('0s')",message="drain.timeout must be a non-negative Go duration such as 10m, 90s or 1h30m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// TransitionSpec bounds config changes cluster-wide, like a rolling update.
type TransitionSpec struct {
	// MaxUnavailable is how many GPU nodes may be changing config at once
	// (draining, releasing, configuring, or failed in a change): a number
	// (at least 1) or a percentage of the GPU nodes (1% to 100%, rounded up,
	// as a DaemonSet's). Other nodes whose config changed wait, pending,
	// and take free slots in the order of their names. The default, 1,
	// is a DaemonSet rolling update's: relabelling many nodes at once takes
	// one node's GPUs out of service at a time, and a change that fails
	// (a drain that times out) stops the rollout there instead of draining
	// the next node. New nodes, setting up their first config, are not
	// bounded (they take nothing from anyone); an uninstall is not either.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="transition.maxUnavailable is a number of nodes (at least 1) or a percentage from 1% to 100%"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// SandboxGPUPolicySpec is the desired sandbox GPU setup of the cluster.
type SandboxGPUPolicySpec struct {
	// +optional
	SandboxWorkloads SandboxWorkloads `json:"sandboxWorkloads,omitempty"`
	// ImagePullSecrets name Secrets in the operand namespace that every
	// operand pod pulls its image with, in addition to the operator's
	// --image-pull-secret ones (which the Helm chart's
	// operator.imagePullSecrets set).
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`
	// ImagePullPolicy of every operand container; empty: the operator's
	// --image-pull-policy.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// GPUDiscovery labels every Linux node from sysfs with
	// sandbox-gpu.io/gpu.present=true and sandbox-gpu.io/gpu.count while it
	// has NVIDIA GPUs, so GPU nodes are found without Node Feature
	// Discovery. It runs whether sandbox workloads are on or not.
	// +optional
	GPUDiscovery OperandSpec `json:"gpuDiscovery,omitempty"`
	// +optional
	VFIOManager VFIOManagerSpec `json:"vfioManager,omitempty"`
	// SandboxDevicePlugin is the KubeVirt device plugin.
	// +optional
	SandboxDevicePlugin OperandSpec `json:"sandboxDevicePlugin,omitempty"`
	// KataSandboxDevicePlugin is the Kata device plugin.
	// +optional
	KataSandboxDevicePlugin OperandSpec `json:"kataSandboxDevicePlugin,omitempty"`
	// +optional
	VGPUManager VGPUManagerSpec `json:"vgpuManager,omitempty"`
	// +optional
	VGPUDeviceManager VGPUDeviceManagerSpec `json:"vgpuDeviceManager,omitempty"`
	// NRIPlugin injects allocated GPUs into ordinary containers.
	// +optional
	NRIPlugin NRIPluginSpec `json:"nriPlugin,omitempty"`
	// DevicePlugin is NVIDIA's k8s-device-plugin (nvidia.com/gpu) where
	// containers get GPUs. Its image defaults to NVIDIA's
	// (nvcr.io/nvidia/k8s-device-plugin).
	// +optional
	DevicePlugin DevicePluginSpec `json:"devicePlugin,omitempty"`
	// Validator checks a node's sandbox GPU setup.
	// +optional
	Validator OperandSpec `json:"validator,omitempty"`
	// +optional
	KubeVirt KubeVirtSpec `json:"kubevirt,omitempty"`
	// +optional
	Kata KataSpec `json:"kata,omitempty"`
	// +optional
	Drain DrainSpec `json:"drain,omitempty"`
	// +optional
	Transition TransitionSpec `json:"transition,omitempty"`
}

// NodeCounts counts GPU nodes per workload config.
type NodeCounts struct {
	Container     int32 `json:"container"`
	VMPassthrough int32 `json:"vmPassthrough"`
	VMVGPU        int32 `json:"vmVGPU"`
	Ready         int32 `json:"ready"`
	Failed        int32 `json:"failed"`
}

// SandboxGPUPolicyStatus is what the operator observed.
type SandboxGPUPolicyStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Degraded (and KataRuntimeClass in Kata mode), each
	// with the observedGeneration it was computed for.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	Nodes NodeCounts `json:"nodes,omitempty"`
}

// SandboxGPUPolicy is the cluster's sandbox GPU policy. There is one, named
// "default".
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=sgpol,categories=sandbox-gpu
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="the policy must be named default"
// +kubebuilder:printcolumn:name="Sandbox",type=boolean,JSONPath=`.spec.sandboxWorkloads.enabled`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.sandboxWorkloads.mode`
// +kubebuilder:printcolumn:name="Default",type=string,JSONPath=`.spec.sandboxWorkloads.defaultWorkload`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SandboxGPUPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxGPUPolicySpec   `json:"spec,omitempty"`
	Status SandboxGPUPolicyStatus `json:"status,omitempty"`
}

// SandboxGPUPolicyList is a list of policies.
// +kubebuilder:object:root=true
type SandboxGPUPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxGPUPolicy `json:"items"`
}
