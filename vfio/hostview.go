package vfio

import (
	"context"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// HostView is what the VFIO manager needs of the host model: exactly the
// methods of *host.Host it calls (the program wiring, vfio/cli, passes
// that one), grouped by the host model's subsystems.
type HostView interface {
	// PCI functions (host/function.go)
	Scan() (*host.Snapshot, error)
	ReadFunction(a host.Address) (*host.Function, error)
	NoFunction(a host.Address) error
	// drivers and binding (host/drivers.go)
	EnsureDriver(ctx context.Context, driver, module string) error
	DriverStateOf(driver, module string) (host.DriverState, error)
	VFIODriverFor(f *host.Function, aliases []host.Alias) (driver, module string)
	HostDriverFor(f *host.Function, aliases []host.Alias) string
	SetDriverOverride(a host.Address, driver string) error
	Unbind(a host.Address, driver string) error
	Probe(a host.Address) error
	// modules (host/modules.go)
	Aliases() ([]host.Alias, error)
	// processes and in-use (host/usage.go), group claims (host/vfiodev.go)
	ScanUsage() (*host.Usage, error)
	InUse(f *host.Function, u *host.Usage) ([]string, error)
	CheckIdle(f *host.Function) error
	ClaimGroup(group int) (release func(), err error)
	// the NVIDIA driver's GPU UUID (host/nvidiadev.go)
	GPUUUID(a host.Address) (string, bool)
}
