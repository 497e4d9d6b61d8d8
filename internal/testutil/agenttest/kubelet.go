package agenttest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources/podresourcestest"
)

// deviceKubelet stands in for the kubelet's device manager: it takes
// device plugin registrations on <dir>/kubelet.sock, follows each
// plugin's ListAndWatch and reports the healthy device count per
// resource; when a plugin's stream ends (the plugin stopped) its resource
// drops to zero, as the kubelet's allocatable does.
type deviceKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir     string
	report  func(resource string, healthy int)
	ctx     context.Context
	srv     *grpc.Server
	wg      sync.WaitGroup
	mu      sync.Mutex
	cancels []context.CancelFunc
}

func startDeviceKubelet(ctx context.Context, dir string, report func(string, int)) (*deviceKubelet, error) {
	sock := filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket))
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("kubelet socket %s: %w", sock, err)
	}
	k := &deviceKubelet{dir: dir, report: report, ctx: ctx, srv: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(ln) }()
	return k, nil
}

func (k *deviceKubelet) stop() {
	k.srv.Stop()
	k.mu.Lock()
	for _, c := range k.cancels {
		c()
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// Register implements the kubelet's registration service.
func (k *deviceKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, fmt.Errorf("device plugin API %s, want %s", r.Version, pluginapi.Version)
	}
	ctx, cancel := context.WithCancel(k.ctx)
	k.mu.Lock()
	k.cancels = append(k.cancels, cancel)
	k.mu.Unlock()
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.watch(ctx, r.ResourceName, filepath.Join(k.dir, r.Endpoint))
	}()
	return &pluginapi.Empty{}, nil
}

func (k *deviceKubelet) watch(ctx context.Context, resource, endpoint string) {
	conn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return
	}
	defer k.report(resource, 0) // the plugin is gone: nothing to allocate
	for {
		resp, err := stream.Recv()
		if err != nil {
			return
		}
		healthy := 0
		for _, d := range resp.Devices {
			if d.Health == pluginapi.Healthy {
				healthy++
			}
		}
		k.report(resource, healthy)
	}
}

// Kubelet is the node's stand-in kubelet PodResources API: a real v1
// server on a unix socket (what the VFIO manager and the vGPU device
// manager ask, through internal/podresources), serving the allocations a
// test sets: a VM pod the kubelet gave a GPU to, whether or not its QEMU
// opened it yet. Allocate, Delete, Socket, Stop and Start (a kubelet
// restart) and the rest come from podresourcestest.Kubelet.
type Kubelet struct {
	*podresourcestest.Kubelet
}

func startKubelet(dir string) (*Kubelet, error) {
	k := &Kubelet{podresourcestest.New(filepath.Join(dir, "kubelet.sock"))}
	if err := k.Start(); err != nil {
		return nil, err
	}
	return k, nil
}

// Free forgets a pod's allocations (the kubelet removed the pod).
func (k *Kubelet) Free(namespace, pod string) { k.Delete(namespace, pod) }
