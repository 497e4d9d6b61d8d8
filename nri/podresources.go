package nri

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Allocation is the device IDs a container holds, by resource name.
type Allocation map[string][]string

// PodAllocations is a pod's allocations by container name.
type PodAllocations map[string]Allocation

// PodResources is what the plugin needs from the kubelet.
type PodResources interface {
	// Get returns the allocations of one pod.
	Get(ctx context.Context, namespace, name string) (PodAllocations, error)
	// List returns the allocations of every pod, by "namespace/name".
	List(ctx context.Context) (map[string]PodAllocations, error)
}

// KubeletPodResources talks to the kubelet's PodResources v1 API over its
// unix socket.
type KubeletPodResources struct {
	socket  string
	conn    *grpc.ClientConn
	client  podresourcesv1.PodResourcesListerClient
	timeout time.Duration
}

// NewKubeletPodResources connects lazily to the socket.
func NewKubeletPodResources(socket string, timeout time.Duration) (*KubeletPodResources, error) {
	// Reconnect within a second of the kubelet coming back (gRPC's default
	// backoff grows to 2 minutes, and creations fail closed meanwhile).
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second}))
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources %s: %w", socket, err)
	}
	if timeout <= 0 {
		timeout = time.Second // well inside the runtime's 2 s per call
	}
	return &KubeletPodResources{socket: socket, conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn), timeout: timeout}, nil
}

// Close closes the connection.
func (k *KubeletPodResources) Close() error { return k.conn.Close() }

// Get implements PodResources.
func (k *KubeletPodResources) Get(ctx context.Context, namespace, name string) (PodAllocations, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	resp, err := k.client.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodName: name, PodNamespace: namespace})
	switch {
	case err == nil:
		return fromPodResources(resp.GetPodResources()), nil
	case status.Code(err) == codes.Unknown && notFound.MatchString(status.Convert(err).Message()):
		// Not a kubelet pod (created through CRI directly): no allocation.
		return PodAllocations{}, nil
	case status.Code(err) == codes.Unimplemented || strings.Contains(status.Convert(err).Message(), "disabled"):
		// Kubelets with the Get method off: one List instead.
		all, lerr := k.List(ctx)
		if lerr != nil {
			return nil, lerr
		}
		if a, ok := all[namespace+"/"+name]; ok {
			return a, nil
		}
		return PodAllocations{}, nil
	default:
		return nil, fmt.Errorf("kubelet PodResources %s: get pod %s/%s: %w", k.socket, namespace, name, err)
	}
}

// List implements PodResources.
func (k *KubeletPodResources) List(ctx context.Context) (map[string]PodAllocations, error) {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	resp, err := k.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources %s: list: %w", k.socket, err)
	}
	out := map[string]PodAllocations{}
	for _, p := range resp.GetPodResources() {
		out[p.GetNamespace()+"/"+p.GetName()] = fromPodResources(p)
	}
	return out, nil
}

func fromPodResources(p *podresourcesv1.PodResources) PodAllocations {
	out := PodAllocations{}
	for _, c := range p.GetContainers() {
		a := Allocation{}
		for _, d := range c.GetDevices() {
			a[d.GetResourceName()] = append(a[d.GetResourceName()], d.GetDeviceIds()...)
		}
		out[c.GetName()] = a
	}
	return out
}

// notFound is the kubelet's answer for a pod it does not know.
var notFound = regexp.MustCompile(`^pod .+ in namespace .+ not found$`)

// cache keeps each pod's allocations for the life of its sandbox, so that
// the kubelet is asked once per pod, not once per container. An entry is
// tied to the sandbox ID it was fetched for: a pod recreated under the same
// name (a StatefulSet's) is fetched again.
type cache struct {
	src PodResources
	mu  sync.Mutex
	m   map[string]cacheEntry // namespace/name
}

type cacheEntry struct {
	sandbox string
	allocs  PodAllocations
}

func newCache(src PodResources) *cache { return &cache{src: src, m: map[string]cacheEntry{}} }

// get returns the pod's allocations, from the cache when it has them for
// this sandbox, otherwise from the kubelet.
func (c *cache) get(ctx context.Context, sandbox, namespace, name string) (PodAllocations, error) {
	key := namespace + "/" + name
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && e.sandbox == sandbox {
		return e.allocs, nil
	}
	allocs, err := c.src.Get(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.m[key] = cacheEntry{sandbox: sandbox, allocs: allocs}
	c.mu.Unlock()
	return allocs, nil
}

// fill adds what a List returned for the given sandboxes (pod key to
// sandbox ID). It replaces nothing fetched since for a newer sandbox.
func (c *cache) fill(all map[string]PodAllocations, sandboxes map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, id := range sandboxes {
		if a, ok := all[key]; ok {
			if _, have := c.m[key]; !have {
				c.m[key] = cacheEntry{sandbox: id, allocs: a}
			}
		}
	}
}

// forget drops a pod (its sandbox is gone or replaced).
func (c *cache) forget(namespace, name string) {
	c.mu.Lock()
	delete(c.m, namespace+"/"+name)
	c.mu.Unlock()
}
