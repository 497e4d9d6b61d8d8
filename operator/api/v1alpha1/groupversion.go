// Package v1alpha1 is the sandbox-gpu operator's API: the cluster-wide
// SandboxGPUPolicy and the per-node SandboxGPUNode state.
// +kubebuilder:object:generate=true
// +groupName=sandbox-gpu.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "sandbox-gpu.io", Version: "v1alpha1"}
	// SchemeBuilder registers the types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &SandboxGPUPolicy{}, &SandboxGPUPolicyList{}, &SandboxGPUNode{}, &SandboxGPUNodeList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
