package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node states.
const (
	StatePending     = "pending"
	StateDraining    = "draining"
	StateConfiguring = "configuring"
	StateReady       = "ready"
	StateFailed      = "failed"
)

// SandboxGPUNodeStatus is the sandbox GPU state of one node.
type SandboxGPUNodeStatus struct {
	// WorkloadConfig is the config the node is (being) set up for.
	// +optional
	WorkloadConfig string `json:"workloadConfig,omitempty"`
	// AppliedConfig is the config whose operands run on the node now.
	// +optional
	AppliedConfig string `json:"appliedConfig,omitempty"`
	// State: pending, draining, configuring, ready or failed.
	// +kubebuilder:validation:Enum=pending;draining;configuring;ready;failed
	// +optional
	State string `json:"state,omitempty"`
	// Since is when the node entered State.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// GPUs on the node.
	// +optional
	GPUs int32 `json:"gpus"`
	// BoundToVFIO counts GPUs on a vfio driver.
	// +optional
	BoundToVFIO int32 `json:"boundToVFIO"`
	// VGPUs counts vGPU devices.
	// +optional
	VGPUs int32 `json:"vgpus"`
	// Message explains the state (an invalid label, what a drain waits for).
	// +optional
	Message string `json:"message,omitempty"`
}

// SandboxGPUNode is the operator's view of one GPU node; it has the
// node's name.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=sgnode
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.metadata.name`
// +kubebuilder:printcolumn:name="Config",type=string,JSONPath=`.status.workloadConfig`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.gpus`
// +kubebuilder:printcolumn:name="VFIO",type=integer,JSONPath=`.status.boundToVFIO`
// +kubebuilder:printcolumn:name="vGPUs",type=integer,JSONPath=`.status.vgpus`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`
type SandboxGPUNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status SandboxGPUNodeStatus `json:"status,omitempty"`
}

// SandboxGPUNodeList is a list of node states.
// +kubebuilder:object:root=true
type SandboxGPUNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxGPUNode `json:"items"`
}
