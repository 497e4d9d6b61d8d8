package hostsim

import (
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/vfio/host"
)

// NewHost builds the named fixture in a test's temporary folder and returns
// the simulated kernel with a host model over it. It fails the test on any
// error; every package's tests use it.
func NewHost(tb testing.TB, fixture string) (*Kernel, *host.Host) {
	tb.Helper()
	fx, err := Lookup(fixture)
	if err != nil {
		tb.Fatal(err)
	}
	k, err := fx.Build(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return k, host.New(k.Options())
}
