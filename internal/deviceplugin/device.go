// Package deviceplugin is the kubelet plumbing both sandbox device plugins
// share: one deviceplugin v1beta1 gRPC server per resource, registration
// with the kubelet (again whenever kubelet.sock or the plugin's own socket
// is recreated), live discovery (fsnotify plus a slow rescan) and health,
// NUMA-aware preferred allocation and validated Allocate. What devices
// exist and what a container gets for them come from a Scanner; this
// package never reads the host itself.
package deviceplugin

import (
	"context"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// NoNUMA marks a device whose NUMA node is unknown.
const NoNUMA = -1

// Device is one allocatable device of a resource.
type Device struct {
	ID   string
	NUMA int
	// Specs are the device nodes a container needs for this device.
	Specs []*pluginapi.DeviceSpec
	// Values are what the resource's Allocate puts in env or CDI names for
	// this device (PCI addresses, mdev UUIDs, CDI device names).
	Values []string
	// Check, when set, is called at Allocate time to confirm the device is
	// still usable (for example: still on a vfio driver). It must be cheap.
	Check func() error
}

// Resource is the current set of devices of one extended resource.
type Resource struct {
	Name    string // e.g. nvidia.com/GA102GL_A10
	Devices []Device
	// Allocate builds a new container response for the given devices
	// (env, CDI names). Device specs are added by the framework.
	Allocate func(devs []Device) *pluginapi.ContainerAllocateResponse
	// WaitsForVFIO marks devices the VFIO manager binds (passthrough GPUs,
	// NVSwitches): they are advertised only once Options.Ready holds.
	// Others (mdev and SR-IOV vGPUs, set up by the vGPU managers) are not
	// held back, so nodes without a VFIO manager still advertise them.
	WaitsForVFIO bool
}

// Scanner discovers the resources of the node. Scan must not change the
// host.
type Scanner interface {
	Scan(ctx context.Context) ([]Resource, error)
}

// ScannerFunc adapts a function to Scanner.
type ScannerFunc func(ctx context.Context) ([]Resource, error)

// Scan calls f.
func (f ScannerFunc) Scan(ctx context.Context) ([]Resource, error) { return f(ctx) }
