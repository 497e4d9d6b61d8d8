package e2e

import (
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"
)

// Serve serves srv on l until the end of the test, when it stops the server; the test fails if
// Serve returned an error other than grpc.ErrServerStopped (a Stop that came first). what names
// the server in the failure.
func Serve(t testing.TB, what string, srv *grpc.Server, l net.Listener) {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("%s: %v", what, err)
		}
	})
}
