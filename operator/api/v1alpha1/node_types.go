package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node states.
const (
	StatePending  = "pending"
	StateDraining = "draining"
	// StateReleasing: the config being left returns its host state (GPUs
	// back to their host driver, vGPUs removed) before the new config's
	// operands start.
	StateReleasing   = "releasing"
	StateConfiguring = "configuring"
	StateReady       = "ready"
	StateFailed      = "failed"
	// StateReleased: the policy is being deleted (uninstall) and the node's
	// host state is returned; no operand runs there any more.
	StateReleased = "released"
)

// Condition types of a SandboxGPUNode; the policy reports Ready and
// Degraded too.
const (
	// ConditionReady is True when the node runs its desired config and that
	// config's operands are ready (the policy: every GPU node is ready).
	ConditionReady = "Ready"
	// ConditionProgressing is True while the node moves to its desired
	// config (pending, draining, releasing, configuring); the reason names
	// the step.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when something failed that needs a person
	// (a drain that timed out; the policy: failed nodes or operands).
	ConditionDegraded = "Degraded"
)

// ConfigTransition is a change of a node's workload config.
type ConfigTransition struct {
	// From is the config the node leaves; empty for a new node.
	// +optional
	From string `json:"from,omitempty"`
	// To is the config the node moves to.
	To string `json:"to"`
	// Started is when the operator saw the change.
	Started metav1.Time `json:"started"`
	// Completed is when the node became ready with To.
	// +optional
	Completed *metav1.Time `json:"completed,omitempty"`
}

// SandboxGPUNodeStatus is the sandbox GPU state of one node.
type SandboxGPUNodeStatus struct {
	// WorkloadConfig is the config the node is (being) set up for.
	// +optional
	WorkloadConfig string `json:"workloadConfig,omitempty"`
	// AppliedConfig is the config whose operands run on the node now.
	// +optional
	AppliedConfig string `json:"appliedConfig,omitempty"`
	// State: pending, draining, releasing, configuring, ready or failed;
	// released once an uninstall returned the node's GPUs.
	// +kubebuilder:validation:Enum=pending;draining;releasing;configuring;ready;failed;released
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
	// ContainerGPUs are, on a mixed node, the container GPUs (PCI
	// addresses) NVIDIA's device plugin was started with. It finds GPUs
	// only at its start: when the split gives GPUs back to containers, the
	// operator restarts it (through its deploy label).
	// +optional
	ContainerGPUs []string `json:"containerGPUs,omitempty"`
	// Transition is the config change in progress, or the last one completed.
	// +optional
	Transition *ConfigTransition `json:"transition,omitempty"`
	// Conditions: Ready, Progressing and Degraded, each with the
	// observedGeneration it was computed for.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SandboxGPUNode is the operator's view of one GPU node; it has the
// node's name.
// +kubebuilder:object:root=true
// The name column is the node's; CONFIG is the config applied now, DESIRED
// the one it moves to; MESSAGE shows with -o wide.
// +kubebuilder:resource:scope=Cluster,shortName=sgnode,categories=sandbox-gpu
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Config",type=string,JSONPath=`.status.appliedConfig`,description="The workload config whose operands run on the node now"
// +kubebuilder:printcolumn:name="Desired",type=string,JSONPath=`.status.workloadConfig`,description="The workload config the node is (being) set up for"
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.gpus`
// +kubebuilder:printcolumn:name="VFIO",type=integer,JSONPath=`.status.boundToVFIO`
// +kubebuilder:printcolumn:name="vGPUs",type=integer,JSONPath=`.status.vgpus`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
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
