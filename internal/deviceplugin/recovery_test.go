package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
)

// listener returns the listener a resource's server serves on now.
func (h *harness) listener(t *testing.T, name string) *net.UnixListener {
	t.Helper()
	h.m.mu.Lock()
	s := h.m.servers[name]
	h.m.mu.Unlock()
	require.NotNil(t, s)
	s.mu.Lock()
	defer s.mu.Unlock()
	ln, ok := s.ln.(*net.UnixListener)
	require.True(t, ok, "serving on a unix listener")
	return ln
}

func (h *harness) ready() bool { return h.m.Health().Ready }

func (h *harness) starts(result string) float64 {
	return promtest.ToFloat64(h.m.metrics.starts.WithLabelValues(res, result))
}

// TestRestartsAServerWhoseListenerFailed: the server's listener is closed
// under it (its socket file left in place, so no file event tells): the
// manager notices the server stopped, restarts it after a backoff,
// registers it again with the kubelet, and readiness goes false, then true.
func TestRestartsAServerWhoseListenerFailed(t *testing.T) {
	h := startWith(t, func(o *Options) { o.RestartBackoff = 300 * time.Millisecond }, nil, dev("12", 0))
	_, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	eventually(t, "ready", h.ready)

	ln := h.listener(t, res)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	eventually(t, "not ready once the listener failed", func() bool { return !h.ready() })
	sh := h.m.Health().Servers[res]
	assert.False(t, sh.Serving)
	assert.Contains(t, sh.Error, "serving on "+h.m.SocketPath(res))

	reg, err := h.kubelet.WaitRegistered(ctxT(t), res, 2)
	require.NoError(t, err, "registered again")
	eventually(t, "ready again", h.ready)
	_, err = h.kubelet.Dial(t, reg.Endpoint).GetDevicePluginOptions(ctxT(t), &pluginapi.Empty{})
	require.NoError(t, err, "serving on a fresh listener")
	updates, err := kubelettest.Watch(ctxT(t), h.kubelet.Dial(t, reg.Endpoint))
	require.NoError(t, err)
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["12"] == pluginapi.Healthy
	})
	require.NoError(t, err)
	assert.Equal(t, 2.0, h.starts("ok"))
}

// TestRestartsOnceWhenListenerAndSocketGo: a listener closed the usual way
// also removes its socket; the two signals (the file event, the server's
// end) give one restart and one registration more.
func TestRestartsOnceWhenListenerAndSocketGo(t *testing.T) {
	h := startWith(t, nil, nil, dev("12", 0))
	_, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	require.NoError(t, h.listener(t, res).Close())
	reg, err := h.kubelet.WaitRegistered(ctxT(t), res, 2)
	require.NoError(t, err)
	eventually(t, "ready again", h.ready)
	updates, err := kubelettest.Watch(ctxT(t), h.kubelet.Dial(t, reg.Endpoint))
	require.NoError(t, err)
	// Once a later change is visible, every signal has been handled.
	h.host.set(t, dev("12", 0), dev("13", 0))
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["13"] == pluginapi.Healthy
	})
	require.NoError(t, err)
	assert.Len(t, h.kubelet.Registrations(), 2)
	assert.Equal(t, 2.0, h.starts("ok"))
	assert.True(t, h.ready())
}

// TestRetriesAServerThatFailedToStart: the socket path is unusable (a
// folder with a file in it) when the manager starts: the server's start
// fails, readiness says why, and the start is retried with a growing
// backoff (100 ms, 200 ms, 400 ms...), not in a tight loop. Once the path is
// usable (only the file inside goes: no event in the watched folder tells),
// a retry serves and registers, and readiness turns true.
func TestRetriesAServerThatFailedToStart(t *testing.T) {
	var blocker string
	began := time.Now()
	h := startWith(t, nil, func(dir string) {
		sock := filepath.Join(dir, "test-"+strings.ReplaceAll(res, "/", "_")+".sock")
		require.NoError(t, os.Mkdir(sock, 0o755))
		blocker = filepath.Join(sock, "in-the-way")
		require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	}, dev("12", 0))
	eventually(t, "four failed starts", func() bool { return h.starts("failed") >= 4 })
	elapsed := time.Since(began)
	assert.GreaterOrEqual(t, elapsed, 700*time.Millisecond, "retries wait 100, 200, 400 ms: no tight loop")
	health := h.m.Health()
	assert.False(t, health.Ready)
	assert.False(t, health.Servers[res].Serving)
	assert.Contains(t, health.Servers[res].Error, "remove stale socket")
	assert.Empty(t, h.kubelet.Registrations())
	assert.LessOrEqual(t, h.starts("failed"), 5.0, "at most one more retry while we looked")

	require.NoError(t, os.Remove(blocker))
	_, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	eventually(t, "ready", h.ready)
	assert.Equal(t, 1.0, h.starts("ok"))
}

func TestBackoffIsCapped(t *testing.T) {
	m, err := NewManager(Options{Dir: "x", SocketPrefix: "p", Scanner: ScannerFunc(nil)})
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, m.opts.RestartBackoff)
	assert.Equal(t, 10*time.Second, m.opts.MaxRestartBackoff)
}

// TestReadinessFollowsTheKubelet: readiness is not latched: a kubelet that
// went away (its socket gone) makes the plugin not ready until it has
// registered with the next one.
func TestReadinessFollowsTheKubelet(t *testing.T) {
	h := startWith(t, nil, nil, dev("12", 0))
	_, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	eventually(t, "ready", h.ready)
	h.kubelet.Stop()
	assert.False(t, h.ready(), "no kubelet, not registered")
	assert.Equal(t, "not registered with the kubelet", h.m.Health().Servers[res].Error)
	k2 := kubelettest.Start(t, h.kubelet.Dir)
	_, err = k2.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	eventually(t, "ready with the new kubelet", h.ready)
}

// TestScanErrorIsNotReady: a scan that fails makes readiness false until a
// scan succeeds again.
func TestScanErrorIsNotReady(t *testing.T) {
	dir := kubelettest.ShortDir(t)
	kubelettest.Start(t, dir)
	fail := make(chan bool, 1)
	fail <- true
	m, err := NewManager(Options{Dir: dir, SocketPrefix: "test", Rescan: time.Hour, Debounce: time.Millisecond, Log: logr.Discard(),
		WatchPaths: []string{dir},
		Scanner: ScannerFunc(func(context.Context) ([]Resource, error) {
			select {
			case <-fail:
				return nil, assert.AnError
			default:
				return nil, nil
			}
		})})
	require.NoError(t, err)
	runManager(t, m)
	eventually(t, "the first scan", func() bool { return m.Attempts() >= 1 })
	h := m.Health()
	assert.False(t, h.Ready)
	assert.Equal(t, assert.AnError.Error(), h.ScanError)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "change"), nil, 0o644))
	eventually(t, "a good scan", func() bool { return m.Health().Ready })
}
