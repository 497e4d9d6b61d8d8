package nritest

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

// Runtime is the real NRI runtime side (the code containerd embeds), in
// process, listening on Socket for external plugins.
type Runtime struct {
	tb      testing.TB
	Socket  string
	version string
	mu      sync.Mutex
	r       *adaptation.Adaptation
	joins   int
	pending int        // plugins synchronized, not yet listed
	started bool       // the start-up sync (pre-installed plugins) is done
	conns   []net.Conn // plugin connections made through Dial
	pods    []*api.PodSandbox
	ctrs    []*api.Container
}

// StartRuntime starts a runtime side that says it is containerd <version>
// (v2.1 and later resolve CDI requests themselves), stopped when the test
// ends.
func StartRuntime(tb testing.TB, dir, version string) *Runtime {
	rt := &Runtime{tb: tb, Socket: filepath.Join(dir, "nri.sock"), version: version}
	rt.Start()
	tb.Cleanup(rt.Stop)
	return rt
}

// Start (re)starts the runtime side.
func (rt *Runtime) Start() {
	rt.tb.Helper()
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		rt.mu.Lock()
		pods, ctrs := rt.pods, rt.ctrs
		rt.mu.Unlock()
		_, err := cb(ctx, pods, ctrs)
		rt.mu.Lock()
		if rt.started && err == nil {
			rt.pending++ // an external plugin, listed next
		}
		rt.started = true
		rt.mu.Unlock()
		return err
	}
	update := func(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) { return nil, nil }
	dir := filepath.Dir(rt.Socket)
	rt.mu.Lock()
	rt.started, rt.pending = false, 0
	rt.mu.Unlock()
	r, err := adaptation.New("containerd", rt.version, syncFn, update, adaptation.WithSocketPath(rt.Socket),
		adaptation.WithMetrics(&joinCounter{rt: rt}),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")), adaptation.WithPluginConfigPath(filepath.Join(dir, "conf")))
	if err != nil {
		rt.tb.Fatalf("NRI runtime side: %v", err)
	}
	if err := r.Start(); err != nil {
		rt.tb.Fatalf("NRI runtime side: %v", err)
	}
	rt.mu.Lock()
	rt.r = r
	rt.mu.Unlock()
}

// Stop is the runtime going away: the runtime side stops and, as when its
// process dies, plugin connections made through Dial close
// (Adaptation.Stop leaves external plugins' connections open).
func (rt *Runtime) Stop() {
	rt.mu.Lock()
	r, conns := rt.r, rt.conns
	rt.r, rt.conns = nil, nil
	rt.mu.Unlock()
	if r != nil {
		r.Stop()
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// Dial connects a plugin to the runtime side, tracked for Stop.
func (rt *Runtime) Dial(socket string) (net.Conn, error) {
	c, err := net.Dial("unix", socket)
	if err == nil {
		rt.mu.Lock()
		rt.conns = append(rt.conns, c)
		rt.mu.Unlock()
	}
	return c, err
}

// SetExisting gives the pods and containers the next plugin synchronizes with.
func (rt *Runtime) SetExisting(pods []*api.PodSandbox, ctrs []*api.Container) {
	rt.mu.Lock()
	rt.pods, rt.ctrs = pods, ctrs
	rt.mu.Unlock()
}

// Joined is how many times a plugin joined (synchronized and listed).
func (rt *Runtime) Joined() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.joins
}

// WaitJoined polls until n plugins joined, failing the test at the deadline.
func (rt *Runtime) WaitJoined(tb testing.TB, n int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for rt.Joined() < n {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %d plugin connection(s) to join", timeout, n)
		}
		<-tick.C
	}
}

// Create sends a CreateContainer request through the runtime side.
func (rt *Runtime) Create(pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	rt.mu.Lock()
	r := rt.r
	rt.mu.Unlock()
	ctr.PodSandboxId = pod.Id
	resp, err := r.CreateContainer(context.Background(), &adaptation.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, err
	}
	return resp.GetAdjust(), nil
}

// joinCounter counts plugins that joined: the runtime side updates its
// plugin count right after a synchronized external plugin enters its list
// (the sync itself is seen in the SyncFn).
type joinCounter struct{ rt *Runtime }

func (j *joinCounter) RecordPluginInvocation(string, string, error)      {}
func (j *joinCounter) RecordPluginLatency(string, string, time.Duration) {}
func (j *joinCounter) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {
}
func (j *joinCounter) UpdatePluginCount(int) {
	j.rt.mu.Lock()
	defer j.rt.mu.Unlock()
	j.rt.joins += j.rt.pending
	j.rt.pending = 0
}
