package agenttest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
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
// opened it yet.
type Kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	// Socket is the PodResources socket.
	Socket string
	mu     sync.Mutex
	pods   map[string]map[string]map[string][]string // ns/name -> container -> resource -> ids
	srv    *grpc.Server
}

func startKubelet(dir string) (*Kubelet, error) {
	k := &Kubelet{Socket: filepath.Join(dir, "kubelet.sock"), pods: map[string]map[string]map[string][]string{}}
	_ = os.Remove(k.Socket)
	ln, err := net.Listen("unix", k.Socket)
	if err != nil {
		return nil, fmt.Errorf("pod resources socket %s: %w", k.Socket, err)
	}
	k.srv = grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(k.srv, k)
	go func() { _ = k.srv.Serve(ln) }()
	return k, nil
}

func (k *Kubelet) stop() { k.srv.Stop() }

// Allocate records that the kubelet gave a pod's container devices of a
// resource (KubeVirt's IDs are PCI addresses, mdev UUIDs or VF addresses).
func (k *Kubelet) Allocate(namespace, pod, container, resource string, ids ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := namespace + "/" + pod
	if k.pods[key] == nil {
		k.pods[key] = map[string]map[string][]string{}
	}
	if k.pods[key][container] == nil {
		k.pods[key][container] = map[string][]string{}
	}
	k.pods[key][container][resource] = append([]string(nil), ids...)
}

// Free forgets a pod's allocations (the kubelet removed the pod).
func (k *Kubelet) Free(namespace, pod string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.pods, namespace+"/"+pod)
}

func (k *Kubelet) podResources(key string) *podresourcesv1.PodResources {
	ns, name, _ := cut(key)
	pr := &podresourcesv1.PodResources{Namespace: ns, Name: name}
	ctrs := make([]string, 0, len(k.pods[key]))
	for c := range k.pods[key] {
		ctrs = append(ctrs, c)
	}
	sort.Strings(ctrs)
	for _, c := range ctrs {
		cr := &podresourcesv1.ContainerResources{Name: c}
		for res, ids := range k.pods[key][c] {
			cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: ids})
		}
		pr.Containers = append(pr.Containers, cr)
	}
	return pr
}

func cut(key string) (ns, name string, ok bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

// List implements the PodResources API.
func (k *Kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := &podresourcesv1.ListPodResourcesResponse{}
	keys := make([]string, 0, len(k.pods))
	for key := range k.pods {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		out.PodResources = append(out.PodResources, k.podResources(key))
	}
	return out, nil
}

// Get implements the PodResources API.
func (k *Kubelet) Get(_ context.Context, r *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := r.PodNamespace + "/" + r.PodName
	if _, ok := k.pods[key]; !ok {
		return nil, fmt.Errorf("pod %s in namespace %s not found", r.PodName, r.PodNamespace)
	}
	return &podresourcesv1.GetPodResourcesResponse{PodResources: k.podResources(key)}, nil
}

// GetAllocatableResources implements the PodResources API (nothing: the
// node daemons do not ask).
func (k *Kubelet) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	return &podresourcesv1.AllocatableResourcesResponse{}, nil
}
