package vgpu

import "github.com/sandbox-gpu/sandbox-gpu/host"

// HostView is what the vGPU device manager needs of the host model:
// exactly the methods of *host.Host it calls (the program wiring,
// vgpu/cli, passes that one), grouped by the host model's subsystems.
type HostView interface {
	// PCI functions (host/function.go)
	Scan() (*host.Snapshot, error)
	ReadFunction(a host.Address) (*host.Function, error)
	// mediated devices (host/mdev.go)
	Mdevs() ([]host.Mdev, error)
	ReadMdev(uuid string) (m host.Mdev, ok bool, err error)
	MdevTypes(parent host.Address) ([]host.MdevType, error)
	CreateMdev(parent host.Address, typeID, uuid string) error
	RemoveMdev(uuid string) error
	MdevInUse(m host.Mdev, u *host.Usage) ([]string, error)
	// SR-IOV VFs and their vendor vGPU (host/vgpu.go)
	VGPU(a host.Address) (host.VGPUType, bool, error)
	SetVGPUType(vf host.Address, id int) error
	SetNumVFs(pf host.Address, n int) error
	// processes and in-use (host/usage.go), group claims (host/vfiodev.go)
	ScanUsage() (*host.Usage, error)
	InUse(f *host.Function, u *host.Usage) ([]string, error)
	ClaimGroup(group int) (release func(), err error)
}
