package main

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
)

// kubelet stands in for a node's kubelet device manager: it takes device
// plugin registrations on <dir>/kubelet.sock, follows each plugin's
// ListAndWatch and reports the healthy device count per resource.
type kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir     string
	report  func(resource string, healthy int)
	ctx     context.Context
	srv     *grpc.Server
	wg      sync.WaitGroup
	mu      sync.Mutex
	cancels []context.CancelFunc
}

func startKubelet(ctx context.Context, dir string, report func(string, int)) (*kubelet, error) {
	sock := filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket))
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("kubelet socket %s: %w", sock, err)
	}
	k := &kubelet{dir: dir, report: report, ctx: ctx, srv: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(ln) }()
	return k, nil
}

func (k *kubelet) stop() {
	k.srv.Stop()
	k.mu.Lock()
	for _, c := range k.cancels {
		c()
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// Register implements the kubelet's registration service.
func (k *kubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
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

func (k *kubelet) watch(ctx context.Context, resource, endpoint string) {
	conn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer conn.Close()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return
	}
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
