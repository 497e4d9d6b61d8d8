package kubevirt

import "github.com/sandbox-gpu/sandbox-gpu/host"

// HostView is what the KubeVirt device plugin needs of the host model:
// exactly the methods of *host.Host it calls (the program wiring passes
// that one).
type HostView interface {
	Scan() (*host.Snapshot, error)                    // host/function.go
	Mdevs() ([]host.Mdev, error)                      // host/mdev.go
	VGPU(a host.Address) (host.VGPUType, bool, error) // host/vgpu.go
	IOMMUFD() bool                                    // host/vfiodev.go
	StillOnVFIO(a host.Address, group int) error      // host/vfiodev.go
	StillMdev(uuid string, group int) error           // host/mdev.go
}
