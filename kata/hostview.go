package kata

import "github.com/sandbox-gpu/sandbox-gpu/host"

// HostView is what the Kata device plugin needs of the host model: exactly
// the methods of *host.Host it calls (the program wiring passes that one).
type HostView interface {
	Scan() (*host.Snapshot, error)               // host/function.go
	IOMMUFD() bool                               // host/vfiodev.go
	StillOnVFIO(a host.Address, group int) error // host/vfiodev.go
}
