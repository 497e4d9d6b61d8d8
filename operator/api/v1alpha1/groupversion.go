// Package v1alpha1 is the sandbox-gpu operator's API: the cluster-wide
// SandboxGPUPolicy and the per-node SandboxGPUNode state.
// +kubebuilder:object:generate=true
// +groupName=sandbox-gpu.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "sandbox-gpu.io", Version: "v1alpha1"}
	// SchemeBuilder registers the types.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
