package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Client-side limits of the operator's API requests by default (the
// --kube-api-qps and --kube-api-burst flags of sandbox-gpu-operator), per
// resource (controller-runtime gives each its own limiter). A new node
// takes two writes of its SandboxGPUNode: at 100 per second 5,000 nodes
// took 100 s on that limit alone. The API server's priority and fairness
// protects it; this only stops a runaway loop.
const (
	DefaultQPS   = 500
	DefaultBurst = 1000
)

// CacheOptions are the operator's cache: only what is used is cached, the
// operand DaemonSets, operand pods and the vGPU config in the operand
// namespace (GPU pods are read from the API server, only while a node
// switches), and of Nodes what the reconcilers read (TrimNode); managed
// fields are stripped from everything.
func CacheOptions(namespace string) cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&appsv1.DaemonSet{}: {Namespaces: map[string]cache.Config{namespace: {}}},
			&corev1.Pod{}:       {Namespaces: map[string]cache.Config{namespace: {}}},
			&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{namespace: {}}},
			&corev1.Node{}:      {Transform: TrimNode},
		},
	}
}
