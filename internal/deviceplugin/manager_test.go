package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
)

const res = "example.com/gpu"

// fakeHost is a scanner over an in-memory device list; a write to its
// watched folder stands for a /dev/vfio change.
type fakeHost struct {
	mu      sync.Mutex
	devices []Device
	dir     string
}

func (f *fakeHost) Scan(context.Context) ([]Resource, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []Resource{{Name: res, WaitsForVFIO: true, Devices: append([]Device(nil), f.devices...), Allocate: func(devs []Device) *pluginapi.ContainerAllocateResponse {
		env := map[string]string{}
		for _, d := range devs {
			env["IDS"] += d.ID + ","
		}
		return &pluginapi.ContainerAllocateResponse{Envs: env}
	}}}, nil
}

func (f *fakeHost) set(t *testing.T, devs ...Device) {
	t.Helper()
	f.mu.Lock()
	f.devices = devs
	f.mu.Unlock()
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "change"), []byte(time.Now().String()), 0o644))
}

func dev(id string, numa int) Device {
	return Device{ID: id, NUMA: numa, Specs: []*pluginapi.DeviceSpec{
		{HostPath: "/dev/vfio/vfio", ContainerPath: "/dev/vfio/vfio", Permissions: "mrw"},
		{HostPath: "/dev/vfio/" + id, ContainerPath: "/dev/vfio/" + id, Permissions: "mrw"}}}
}

type harness struct {
	m       *Manager
	host    *fakeHost
	kubelet *kubelettest.Stub
	cancel  context.CancelFunc
	done    chan error
	metrics *prometheus.Registry
}

// start runs a manager over devs with a stand-in kubelet; ready, when set,
// is its Options.Ready.
func start(t *testing.T, ready func() bool, devs ...Device) *harness {
	t.Helper()
	return startWith(t, func(o *Options) { o.Ready = ready }, nil, devs...)
}

// startWith is start with changed options; before runs ahead of the
// manager (to block its socket path, say).
func startWith(t *testing.T, change func(*Options), before func(dir string), devs ...Device) *harness {
	t.Helper()
	dir := kubelettest.ShortDir(t)
	watch := filepath.Join(dir, "watch")
	require.NoError(t, os.Mkdir(watch, 0o755))
	h := &harness{host: &fakeHost{devices: devs, dir: watch}, done: make(chan error, 1), metrics: prometheus.NewRegistry()}
	h.kubelet = kubelettest.Start(t, dir)
	o := Options{Dir: dir, SocketPrefix: "test", Scanner: h.host, WatchPaths: []string{watch}, Rescan: time.Hour, Log: logr.Discard(), Registerer: h.metrics}
	if change != nil {
		change(&o)
	}
	if before != nil {
		before(dir)
	}
	var err error
	h.m, err = NewManager(o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.m.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	return h
}

func (h *harness) stop(t *testing.T) {
	h.cancel()
	select {
	case err := <-h.done:
		require.NoError(t, err)
		h.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("manager did not stop")
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRegistersAndListsWithTopology(t *testing.T) {
	h := start(t, nil, dev("12", 0), dev("13", 1))
	reg, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	assert.Equal(t, pluginapi.Version, reg.Version)
	assert.Equal(t, filepath.Base(h.m.SocketPath(res)), reg.Endpoint)
	assert.True(t, reg.Options.GetPreferredAllocationAvailable)

	c := h.kubelet.Dial(t, reg.Endpoint)
	updates, err := kubelettest.Watch(ctxT(t), c)
	require.NoError(t, err)
	first, err := kubelettest.Await(updates, 5*time.Second, func(*pluginapi.ListAndWatchResponse) bool { return true })
	require.NoError(t, err)
	require.Len(t, first.Devices, 2)
	assert.Equal(t, "12", first.Devices[0].ID)
	assert.Equal(t, int64(1), first.Devices[1].Topology.Nodes[0].ID)
	assert.Equal(t, pluginapi.Healthy, first.Devices[0].Health)
}

func TestRemovedDevicesTurnUnhealthyAndBack(t *testing.T) {
	h := start(t, nil, dev("12", 0), dev("13", 0))
	reg, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	updates, err := kubelettest.Watch(ctxT(t), h.kubelet.Dial(t, reg.Endpoint))
	require.NoError(t, err)

	h.host.set(t, dev("12", 0))
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["13"] == pluginapi.Unhealthy
	})
	require.NoError(t, err, "a vanished device turns Unhealthy")

	h.host.set(t, dev("12", 0), dev("13", 0), dev("14", 0))
	r, err := kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["13"] == pluginapi.Healthy && kubelettest.Health(r)["14"] == pluginapi.Healthy
	})
	require.NoError(t, err, "a device that comes back is Healthy; a new one is advertised")
	assert.Len(t, r.Devices, 3)
}

func TestAllocateValidatesAndBuildsFreshResponses(t *testing.T) {
	broken := dev("14", 0)
	var checks atomic.Int32
	var fixed atomic.Bool
	broken.Check = func() error {
		checks.Add(1)
		if fixed.Load() {
			return nil
		}
		return os.ErrNotExist
	}
	h := start(t, nil, dev("12", 0), dev("13", 0), broken)
	reg, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	c := h.kubelet.Dial(t, reg.Endpoint)
	ctx := ctxT(t)

	resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"12"}}, {DevicesIds: []string{"13"}}}})
	require.NoError(t, err)
	require.Len(t, resp.ContainerResponses, 2)
	assert.Equal(t, "12,", resp.ContainerResponses[0].Envs["IDS"])
	assert.Equal(t, "13,", resp.ContainerResponses[1].Envs["IDS"], "no env leaks from one container to the next")
	paths := []string{}
	for _, d := range resp.ContainerResponses[0].Devices {
		paths = append(paths, d.HostPath)
	}
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/12"}, paths)

	resp, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"12", "13"}}}})
	require.NoError(t, err)
	assert.Len(t, resp.ContainerResponses[0].Devices, 3, "/dev/vfio/vfio once")

	_, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"12", "99", "98"}}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unknown devices 99, 98")

	allocate14 := func() error {
		_, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"14"}}}})
		return err
	}
	err = allocate14()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unhealthy devices 14 (file does not exist)", "checked at Allocate")
	assert.Equal(t, int32(1), checks.Load())
	err = allocate14()
	require.Error(t, err)
	assert.True(t, strings.HasSuffix(err.Error(), "unhealthy devices 14"), "a device that failed its check is refused as Unhealthy, not checked again: %v", err)

	// A scan that finds it checks it again: still failing, it stays
	// Unhealthy (a rescan does not clear what Allocate found); once its
	// check passes, it turns Healthy.
	updates, err := kubelettest.Watch(ctx, c)
	require.NoError(t, err)
	before := checks.Load()
	h.host.set(t, dev("12", 0), dev("13", 0), broken, dev("15", 0)) // 15 new: the scan shows
	r, err := kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		_, ok := kubelettest.Health(r)["15"]
		return ok
	})
	require.NoError(t, err)
	assert.Equal(t, pluginapi.Unhealthy, kubelettest.Health(r)["14"], "still Unhealthy after the scan")
	assert.Greater(t, checks.Load(), before, "the scan checked 14 again")
	fixed.Store(true)
	h.host.set(t, dev("12", 0), dev("13", 0), broken, dev("15", 0))
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["14"] == pluginapi.Healthy
	})
	require.NoError(t, err, "14 passes its check at the next scan: Healthy")
	require.NoError(t, allocate14())

	h.host.set(t, dev("12", 0), dev("13", 0))
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["13"] == pluginapi.Healthy && kubelettest.Health(r)["14"] == pluginapi.Unhealthy
	})
	require.NoError(t, err)
	h.host.set(t, dev("12", 0))
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["13"] == pluginapi.Unhealthy
	})
	require.NoError(t, err)
	_, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"13"}}}})
	require.Error(t, err, "never allocates a device that left")
}

func TestStreamEndsWithClient(t *testing.T) {
	h := start(t, nil, dev("12", 0))
	reg, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	c := h.kubelet.Dial(t, reg.Endpoint)
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		updates, err := kubelettest.Watch(ctx, c)
		require.NoError(t, err)
		_, err = kubelettest.Await(updates, 5*time.Second, func(*pluginapi.ListAndWatchResponse) bool { return true })
		require.NoError(t, err)
		cancel()
	}
	eventually(t, "every stream closed", func() bool { return h.m.Streams(res) == 0 })
}

func TestReRegistersWhenKubeletRestarts(t *testing.T) {
	h := start(t, nil, dev("12", 0))
	_, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)

	// The kubelet restarts: it stops, wipes the folder, listens again.
	h.kubelet.Stop()
	entries, err := os.ReadDir(h.kubelet.Dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() != "watch" {
			require.NoError(t, os.Remove(filepath.Join(h.kubelet.Dir, e.Name())))
		}
	}
	h.host.set(t) // a device vanishes while the kubelet is away
	k2 := kubelettest.Start(t, h.kubelet.Dir)
	reg, err := k2.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err, "registered with the new kubelet")
	updates, err := kubelettest.Watch(ctxT(t), k2.Dial(t, reg.Endpoint))
	require.NoError(t, err)
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["12"] == pluginapi.Unhealthy
	})
	require.NoError(t, err, "the new kubelet sees the current health")

	// Every event of the restart has been handled once a later device
	// change is visible: still exactly one registration with this kubelet.
	h.host.set(t, dev("12", 0), dev("13", 0))
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["13"] == pluginapi.Healthy
	})
	require.NoError(t, err)
	assert.Len(t, k2.Registrations(), 1, "one registration per kubelet instance")
}

// A kubelet that refuses the first attempt (its socket exists before it
// serves) gets the registration retried within a moment, not at the next
// rescan (an hour here).
func TestRetriesRefusedRegistrationQuickly(t *testing.T) {
	dir := kubelettest.ShortDir(t)
	stub := kubelettest.Start(t, dir)
	stub.RejectNext(2)
	host := &fakeHost{devices: []Device{dev("12", 0)}, dir: t.TempDir()}
	m, err := NewManager(Options{Dir: dir, SocketPrefix: "test", Scanner: host, Rescan: time.Hour, Log: logr.Discard()})
	require.NoError(t, err)
	runManager(t, m)
	_, err = stub.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
}

func TestReRegistersWhenOwnSocketRemoved(t *testing.T) {
	h := start(t, nil, dev("12", 0))
	_, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	require.NoError(t, os.Remove(h.m.SocketPath(res)))
	reg, err := h.kubelet.WaitRegistered(ctxT(t), res, 2)
	require.NoError(t, err)
	_, err = h.kubelet.Dial(t, reg.Endpoint).GetDevicePluginOptions(ctxT(t), &pluginapi.Empty{})
	require.NoError(t, err, "serving again on a fresh socket")
}

func TestWaitsForReadiness(t *testing.T) {
	var mu sync.Mutex
	ready := false
	h := start(t, func() bool { mu.Lock(); defer mu.Unlock(); return ready }, dev("12", 0))
	eventually(t, "a scan attempt", func() bool { return h.m.Attempts() >= 1 })
	h.host.set(t, dev("12", 0))
	eventually(t, "a second scan attempt", func() bool { return h.m.Attempts() >= 2 })
	_, err := os.Stat(h.m.SocketPath(res))
	assert.True(t, os.IsNotExist(err), "nothing served before the VFIO manager is ready")
	assert.Empty(t, h.kubelet.Registrations(), "nothing advertised before the VFIO manager is ready")
	assert.Zero(t, h.m.Scans())
	mu.Lock()
	ready = true
	mu.Unlock()
	h.host.set(t, dev("12", 0)) // the ready file appearing is a watched change
	_, err = h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
}

// vGPUs (mdev, SR-IOV) are not the VFIO manager's: a node without one (a
// vm-vgpu node) advertises them even though its readiness never comes.
func TestOnlyPassthroughWaitsForReadiness(t *testing.T) {
	dir := kubelettest.ShortDir(t)
	stub := kubelettest.Start(t, dir)
	const vgpu = "example.com/vgpu"
	scanner := ScannerFunc(func(context.Context) ([]Resource, error) {
		return []Resource{
			{Name: res, WaitsForVFIO: true, Devices: []Device{dev("12", 0)}},
			{Name: vgpu, Devices: []Device{dev("mdev-1", 0)}},
		}, nil
	})
	var published []string
	var mu sync.Mutex
	m, err := NewManager(Options{Dir: dir, SocketPrefix: "test", Scanner: scanner, Rescan: time.Hour, Log: logr.Discard(),
		Ready: func() bool { return false },
		OnScan: func(rs []Resource) error {
			mu.Lock()
			defer mu.Unlock()
			published = nil
			for _, r := range rs {
				published = append(published, r.Name)
			}
			return nil
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	_, err = stub.WaitRegistered(ctxT(t), vgpu, 1)
	require.NoError(t, err)
	for _, r := range stub.Registrations() {
		assert.NotEqual(t, res, r.ResourceName, "passthrough advertised before the VFIO manager is ready")
	}
	_, err = os.Stat(m.SocketPath(res))
	assert.True(t, os.IsNotExist(err))
	mu.Lock()
	assert.Equal(t, []string{vgpu}, published, "only what is advertised is published")
	mu.Unlock()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, cond)
}

// The scan result is published (CDI specs) before the kubelet hears of a
// resource, so a device is resolvable before it can be allocated.
func TestPublishesBeforeRegistering(t *testing.T) {
	dir := kubelettest.ShortDir(t)
	stub := kubelettest.Start(t, dir)
	published := make(chan int, 16)
	host := &fakeHost{devices: []Device{dev("12", 0)}, dir: t.TempDir()}
	m, err := NewManager(Options{Dir: dir, SocketPrefix: "test", Scanner: host, Rescan: time.Hour, Log: logr.Discard(),
		OnScan: func([]Resource) error { published <- len(stub.Registrations()); return nil }})
	require.NoError(t, err)
	runManager(t, m)
	_, err = stub.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	assert.Equal(t, 0, <-published, "published while nothing was registered yet")
}

// runManager runs m until the test ends.
func runManager(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}
