package kubelet

import (
	_ "unsafe" // for go:linkname

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// newManagerImpl is the kubelet's own constructor, the one its device manager tests use: the exported
// NewManagerImpl hard-codes /var/lib/kubelet/device-plugins/kubelet.sock. Its signature must match
// k8s.io/kubernetes's exactly; a k8s bump that changes it fails at link time or crashes, so bump with care.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(logger klog.Logger, socketPath string, topology []cadvisorapi.Node, store topologymanager.Store) (*devicemanager.ManagerImpl, error)
