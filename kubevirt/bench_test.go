package kubevirt

import (
	"context"
	"net"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// noopPlugin is the floor: a device plugin that answers Allocate with an
// empty response and does nothing else.
type noopPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
}

func (noopPlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
	}
	return resp, nil
}

// runPlugin serves the KubeVirt plugin for the fixture with every NVIDIA
// function on vfio-pci, registered with a kubelet stub.
func runPlugin(b *testing.B, fixture string) (*hostsim.Kernel, *host.Host, *kubelettest.Stub, pluginapi.DevicePluginClient, string) {
	k, h := hostsim.NewHost(b, fixture)
	move(b, h, allNVIDIA, vfio.ToVFIO)
	dir := kubelettest.ShortDir(b)
	stub := kubelettest.Start(b, dir)
	n, err := NewNamer("", "")
	if err != nil {
		b.Fatal(err)
	}
	s := &Scanner{Host: h, Namer: n}
	m, err := deviceplugin.NewManager(deviceplugin.Options{Dir: dir, SocketPrefix: "bench", Scanner: s, Rescan: time.Hour,
		WatchPaths: []string{filepath.Join(h.DevRoot(), "vfio"), filepath.Join(h.SysfsRoot(), "bus", "pci", "drivers", "vfio-pci")},
		Log:        logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	res, err := s.Scan(ctx)
	if err != nil || len(res) != 1 {
		b.Fatalf("scan: %v %v", res, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	reg, err := stub.WaitRegistered(wctx, res[0].Name, 1)
	if err != nil {
		b.Fatal(err)
	}
	return k, h, stub, stub.Dial(b, reg.Endpoint), res[0].Devices[0].ID
}

func percentile(d []time.Duration, p float64) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(float64(len(d)-1)*p)]
}

// BenchmarkAllocate calls Allocate over the real unix-socket gRPC, 2000
// times per iteration, alternating between a do-nothing plugin (the floor)
// and the KubeVirt plugin serving the HGX fixture (8 devices). Target: the
// plugin adds at most 20 us over the floor at p50.
func BenchmarkAllocate(b *testing.B) {
	_, _, stub, plugin, id := runPlugin(b, "hgx-h100")
	sock := filepath.Join(stub.Dir, "noop.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, noopPlugin{})
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	noop := stub.Dial(b, "noop.sock")
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{id}}}}
	ctx := context.Background()
	for i := 0; i < 100; i++ { // warm both connections
		if _, err := noop.Allocate(ctx, req); err != nil {
			b.Fatal(err)
		}
		if _, err := plugin.Allocate(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	const calls = 2000
	var floor, ours []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < calls; j++ {
			t0 := time.Now()
			if _, err := noop.Allocate(ctx, req); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := plugin.Allocate(ctx, req); err != nil {
				b.Fatal(err)
			}
			floor, ours = append(floor, t1.Sub(t0)), append(ours, time.Since(t1))
		}
	}
	b.StopTimer()
	f50, o50 := percentile(floor, 0.5), percentile(ours, 0.5)
	b.ReportMetric(float64(f50.Nanoseconds())/1e3, "noop-p50-us")
	b.ReportMetric(float64(o50.Nanoseconds())/1e3, "plugin-p50-us")
	b.ReportMetric(float64((o50-f50).Nanoseconds())/1e3, "added-p50-us")
	b.ReportMetric(float64(percentile(ours, 0.99).Nanoseconds())/1e3, "plugin-p99-us")
}

// BenchmarkRemovalVisible measures from the start of a GPU's rebind to
// its host driver until ListAndWatch shows it Unhealthy (target: under
// 200 ms), then binds it back.
func BenchmarkRemovalVisible(b *testing.B) {
	_, h, _, plugin, id := runPlugin(b, "a10")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	updates, err := kubelettest.Watch(ctx, plugin)
	if err != nil {
		b.Fatal(err)
	}
	one := vfio.Selection{Devices: []host.Address{host.Address(id)}, Vendor: host.VendorNVIDIA}
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		move(b, h, one, vfio.ToHost)
		if _, err := kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
			return kubelettest.Health(r)[id] == pluginapi.Unhealthy
		}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		move(b, h, one, vfio.ToVFIO)
		if _, err := kubelettest.Await(updates, 5*time.Second, func(r *pluginapi.ListAndWatchResponse) bool {
			return kubelettest.Health(r)[id] == pluginapi.Healthy
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1e3, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 1).Microseconds())/1e3, "max-ms")
}
