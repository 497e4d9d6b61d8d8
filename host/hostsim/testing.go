package hostsim

import "github.com/sandbox-gpu/sandbox-gpu/host"

// TB is the part of testing.TB that NewHost needs; taking it as an
// interface keeps the testing package out of binaries that link hostsim.
type TB interface {
	Helper()
	Fatal(args ...any)
	TempDir() string
}

// NewHost builds the named fixture in a test's temporary folder and returns
// the simulated kernel with a host model over it. It fails the test on any
// error; every package's tests use it.
func NewHost(tb TB, fixture string) (*Kernel, *host.Host) {
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
