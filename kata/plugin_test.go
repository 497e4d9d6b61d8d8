package kata

import (
	"context"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// plugin is the Kata plugin as cmd/kata-device-plugin wires it: the
// scanner over a simulated host, the CDI writer on every scan, a stub
// kubelet over real unix sockets.
type plugin struct {
	k       *hostsim.Kernel
	h       *host.Host
	m       *deviceplugin.Manager
	kubelet *kubelettest.Stub
	cdiDir  string
}

func startPlugin(t *testing.T, fixture string) *plugin {
	t.Helper()
	k, h := onVFIO(t, fixture)
	dir := kubelettest.ShortDir(t)
	p := &plugin{k: k, h: h, cdiDir: t.TempDir(), kubelet: kubelettest.Start(t, dir)}
	writer := &CDIWriter{Dir: p.cdiDir}
	var err error
	p.m, err = deviceplugin.NewManager(deviceplugin.Options{
		Dir: dir, SocketPrefix: "kata-test", Scanner: &Scanner{Host: h}, OnScan: writer.Write,
		Rescan: time.Hour, // only fsnotify can explain a change within the test
		WatchPaths: []string{
			filepath.Join(k.Root(), "dev", "vfio"),
			filepath.Join(k.Root(), "sys", "bus", "pci", "drivers", "vfio-pci"),
		},
		Log: logr.Discard(),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("manager did not stop")
		}
	})
	return p
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (p *plugin) client(t *testing.T, resource string) pluginapi.DevicePluginClient {
	t.Helper()
	reg, err := p.kubelet.WaitRegistered(testCtx(t), resource, 1)
	require.NoError(t, err)
	assert.Equal(t, pluginapi.Version, reg.Version)
	assert.Equal(t, filepath.Base(p.m.SocketPath(resource)), reg.Endpoint)
	return p.kubelet.Dial(t, reg.Endpoint)
}

func allocate(ctx context.Context, c pluginapi.DevicePluginClient, ids ...string) (*pluginapi.AllocateResponse, error) {
	return c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
}

func specHostPaths(r *pluginapi.ContainerAllocateResponse) []string {
	out := []string{}
	for _, d := range r.Devices {
		out = append(out, d.HostPath)
	}
	return out
}

func TestPluginEndToEndA10(t *testing.T) {
	p := startPlugin(t, "a10")
	c := p.client(t, DefaultResource)
	ctx := testCtx(t)
	spec := specPath(p.cdiDir, DefaultResource)
	eventually(t, 5*time.Second, func() bool { return exists(spec) }, "CDI spec %s written", spec)

	updates, err := kubelettest.Watch(ctx, c)
	require.NoError(t, err)
	first, err := kubelettest.Await(updates, 5*time.Second, func(*pluginapi.ListAndWatchResponse) bool { return true })
	require.NoError(t, err)
	require.Len(t, first.Devices, 1)
	assert.Equal(t, "12", first.Devices[0].ID)
	assert.Equal(t, pluginapi.Healthy, first.Devices[0].Health)
	require.NotNil(t, first.Devices[0].Topology)
	assert.Equal(t, int64(0), first.Devices[0].Topology.Nodes[0].ID)

	resp, err := allocate(ctx, c, "12")
	require.NoError(t, err)
	require.Len(t, resp.ContainerResponses, 1)
	cr := resp.ContainerResponses[0]
	assert.Equal(t, []string{"nvidia.com/pgpu=12"}, cdiNames(cr))
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/12"}, specHostPaths(cr))
	assert.NotNil(t, loadCDI(t, p.cdiDir).GetDevice(cr.CdiDevices[0].Name), "the name Allocate returns resolves in the spec written")

	_, err = allocate(ctx, c, "99")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "99")

	// The GPU goes back to its host driver: /dev/vfio/12 vanishes, fsnotify
	// triggers a scan, the kubelet sees it Unhealthy.
	moved := time.Now()
	toHost(t, p.h, "0000:3b:00.0")
	require.Equal(t, "nvidia", p.k.DriverOf("0000:3b:00.0"))
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["12"] == pluginapi.Unhealthy
	})
	require.NoError(t, err, "a GPU returned to the host turns Unhealthy")
	t.Logf("Unhealthy %s after the move", time.Since(moved))
	_, err = allocate(ctx, c, "12")
	require.Error(t, err, "never allocates a GPU on a host driver")
	assert.Contains(t, err.Error(), "12")
	eventually(t, 5*time.Second, func() bool { return !exists(spec) }, "CDI spec of the vanished resource removed")

	// Back on vfio: Healthy again, allocatable, and the spec is back.
	move(t, p.h, allNVIDIA, vfio.ToVFIO)
	_, err = kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["12"] == pluginapi.Healthy
	})
	require.NoError(t, err, "a GPU back on vfio turns Healthy")
	_, err = allocate(ctx, c, "12")
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() bool { return exists(spec) }, "CDI spec written again")
	assert.NotNil(t, loadCDI(t, p.cdiDir).GetDevice("nvidia.com/pgpu=12"))
}

func TestPluginEndToEndHGX(t *testing.T) {
	p := startPlugin(t, "hgx-h100")
	gpus := p.client(t, DefaultResource)
	switches := p.client(t, DefaultNVSwitchResource)
	ctx := testCtx(t)
	assert.Equal(t, []string{DefaultNVSwitchResource, DefaultResource}, p.m.Resources())

	updates, err := kubelettest.Watch(ctx, gpus)
	require.NoError(t, err)
	first, err := kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool { return len(r.Devices) == 8 })
	require.NoError(t, err)
	for _, d := range first.Devices {
		assert.Equal(t, pluginapi.Healthy, d.Health)
	}

	// Preferred allocation keeps two GPUs on one NUMA node.
	pref, err := gpus.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: []string{"20", "24", "25", "26"}, AllocationSize: 2}}})
	require.NoError(t, err)
	got := append([]string(nil), pref.ContainerResponses[0].DeviceIDs...)
	sort.Strings(got)
	require.Len(t, got, 2)
	assert.NotContains(t, got, "20", "GPU 20 is alone on NUMA 0")

	resp, err := allocate(ctx, gpus, "21", "26")
	require.NoError(t, err)
	cr := resp.ContainerResponses[0]
	assert.Equal(t, []string{"nvidia.com/pgpu=21", "nvidia.com/pgpu=26"}, cdiNames(cr))
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/21", "/dev/vfio/26"}, specHostPaths(cr), "/dev/vfio/vfio once")

	resp, err = allocate(ctx, switches, "40", "41", "42", "43")
	require.NoError(t, err)
	assert.Equal(t, []string{"nvidia.com/nvswitch=40", "nvidia.com/nvswitch=41", "nvidia.com/nvswitch=42", "nvidia.com/nvswitch=43"},
		cdiNames(resp.ContainerResponses[0]))
	cache := loadCDI(t, p.cdiDir)
	for _, n := range cdiNames(resp.ContainerResponses[0]) {
		assert.NotNil(t, cache.GetDevice(n), n)
	}

	// One GPU back to its host driver: only that ID turns Unhealthy and
	// leaves the spec.
	toHost(t, p.h, hgxGPUs[3])
	r, err := kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
		return kubelettest.Health(r)["23"] == pluginapi.Unhealthy
	})
	require.NoError(t, err)
	for id, health := range kubelettest.Health(r) {
		if id != "23" {
			assert.Equal(t, pluginapi.Healthy, health, id)
		}
	}
	eventually(t, 5*time.Second, func() bool {
		c, err := cdiCache(p.cdiDir)
		return err == nil && c.GetDevice("nvidia.com/pgpu=23") == nil && c.GetDevice("nvidia.com/pgpu=22") != nil
	}, "spec without GPU 23")
}
