// Package kubelettest is a faithful stand-in for the kubelet's device-plugin
// registration service over a real unix-socket gRPC server, for fast tests
// of device plugins. (The kubelet's real device manager runs in the test/
// module's suites.)
package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Stub serves Registration on <dir>/kubelet.sock and records requests. It
// checks them the way the kubelet does (version, endpoint in the dir).
type Stub struct {
	pluginapi.UnimplementedRegistrationServer
	Dir    string
	socket string
	srv    *grpc.Server

	mu     sync.Mutex
	regs   []*pluginapi.RegisterRequest
	wake   chan struct{}
	reject int
}

// RejectNext makes the next n Register calls fail, as a kubelet that is
// not ready yet does.
func (s *Stub) RejectNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reject = n
}

// Start serves a stub kubelet in dir until the test ends (or Stop).
func Start(tb testing.TB, dir string) *Stub {
	tb.Helper()
	s := &Stub{Dir: dir, socket: filepath.Join(dir, "kubelet.sock"), wake: make(chan struct{})}
	_ = os.Remove(s.socket)
	ln, err := net.Listen("unix", s.socket)
	if err != nil {
		tb.Fatalf("kubelet stub: listen %s: %v", s.socket, err)
	}
	s.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(s.srv, s)
	go func() { _ = s.srv.Serve(ln) }()
	tb.Cleanup(s.Stop)
	return s
}

// Stop stops serving and removes kubelet.sock.
func (s *Stub) Stop() {
	s.srv.Stop()
	_ = os.Remove(s.socket)
}

// Register implements the kubelet's Registration service.
func (s *Stub) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported version %q", r.Version)
	}
	if filepath.Base(r.Endpoint) != r.Endpoint {
		return nil, fmt.Errorf("endpoint %q is not a file name in %s", r.Endpoint, s.Dir)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, r.Endpoint)); err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", r.Endpoint, err)
	}
	s.mu.Lock()
	if s.reject > 0 {
		s.reject--
		s.mu.Unlock()
		return nil, fmt.Errorf("kubelet stub: not ready")
	}
	s.regs = append(s.regs, r)
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
	return &pluginapi.Empty{}, nil
}

// Registrations returns the requests received so far.
func (s *Stub) Registrations() []*pluginapi.RegisterRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*pluginapi.RegisterRequest(nil), s.regs...)
}

// WaitRegistered waits until resource has registered at least n times.
func (s *Stub) WaitRegistered(ctx context.Context, resource string, n int) (*pluginapi.RegisterRequest, error) {
	for {
		s.mu.Lock()
		var last *pluginapi.RegisterRequest
		count := 0
		for _, r := range s.regs {
			if r.ResourceName == resource {
				count++
				last = r
			}
		}
		wake := s.wake
		s.mu.Unlock()
		if count >= n {
			return last, nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("resource %s registered %d times, want %d: %w", resource, count, n, ctx.Err())
		}
	}
}

// Dial connects to a plugin endpoint in the stub's dir.
func (s *Stub) Dial(tb testing.TB, endpoint string) pluginapi.DevicePluginClient {
	tb.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(s.Dir, endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("dial %s: %v", endpoint, err)
	}
	tb.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

// ShortDir makes a folder whose unix socket paths stay under the 108-byte
// limit (t.TempDir() paths can be too long), removed when the test ends.
func ShortDir(tb testing.TB) string {
	tb.Helper()
	base := "/dev/shm"
	if st, err := os.Stat(base); err != nil || !st.IsDir() {
		base = ""
	}
	dir, err := os.MkdirTemp(base, "dp")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Watch opens a ListAndWatch stream and delivers each update.
func Watch(ctx context.Context, c pluginapi.DevicePluginClient) (<-chan *pluginapi.ListAndWatchResponse, error) {
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return nil, err
	}
	out := make(chan *pluginapi.ListAndWatchResponse, 64)
	go func() {
		defer close(out)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// Await reads updates until one satisfies cond, failing after timeout.
func Await(updates <-chan *pluginapi.ListAndWatchResponse, timeout time.Duration, cond func(*pluginapi.ListAndWatchResponse) bool) (*pluginapi.ListAndWatchResponse, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case r, ok := <-updates:
			if !ok {
				return nil, errors.New("ListAndWatch stream ended")
			}
			if cond(r) {
				return r, nil
			}
		case <-deadline.C:
			return nil, fmt.Errorf("no matching ListAndWatch update within %s", timeout)
		}
	}
}

// Health returns each device's health by ID.
func Health(r *pluginapi.ListAndWatchResponse) map[string]string {
	out := map[string]string{}
	for _, d := range r.Devices {
		out[d.ID] = d.Health
	}
	return out
}
