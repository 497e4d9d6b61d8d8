// Package kubelet holds the suite that runs the product's device plugins, as built binaries, against the
// kubelet's own device manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager): registration,
// capacity, allocation, over-requests, devices leaving, and kubelet restarts; and the KubeVirt plugin's
// vGPUs as the vGPU device manager made them (mdev and SR-IOV vendor-specific VFIO), paused by it.
package kubelet
