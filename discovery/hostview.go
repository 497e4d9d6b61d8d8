package discovery

import "github.com/sandbox-gpu/sandbox-gpu/host"

// HostView is what the discovery agent needs of the host model: exactly
// the methods of *host.Host it calls (the validator's main passes that one).
type HostView interface {
	Scan() (*host.Snapshot, error) // host/function.go
	NVIDIADriver() (string, error) // host/nvidiadev.go
}
