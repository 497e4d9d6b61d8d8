// Package podresourcestest is a stand-in for the kubelet's PodResources v1
// API: a real gRPC server on a unix socket, serving a table of pods,
// containers and device allocations that its user changes at run time.
// The NRI plugin's tests, the node agents of internal/testutil/agenttest (and so the
// demo) and the containerd suite all ask it through the same client code
// the node daemons use against a real kubelet.
//
// It answers like the kubelet (pkg/kubelet/apis/podresources/server_v1.go):
// Get of a pod it does not know fails with the plain error "pod X in
// namespace Y not found"; List returns pods by namespace and name,
// containers and resources by name, each resource's device IDs in the
// order they were allocated.
//
// It imports no test framework: the demo, an application, uses it too.
package podresourcestest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Calls counts the PodResources calls the server received, by method
// (a call counts when it arrives, before any Delay).
type Calls struct {
	List, Get, GetAllocatableResources int
}

type podKey struct{ namespace, name string }

// Kubelet is the stand-in kubelet's PodResources API. Its methods are safe
// for concurrent use.
type Kubelet struct {
	socket string

	mu          sync.Mutex
	pods        map[podKey]map[string]map[string][]string // pod -> container -> resource -> device IDs
	allocatable map[string][]string                       // resource -> device IDs
	calls       Calls
	delay       chan struct{} // while set, calls wait for it to close
	srv         *grpc.Server  // nil while stopped
	served      chan error    // Serve's result
}

// New is a stopped stand-in kubelet that will serve on socket, knowing no
// pods and no allocatable devices.
func New(socket string) *Kubelet {
	return &Kubelet{socket: socket, pods: map[podKey]map[string]map[string][]string{}, allocatable: map[string][]string{}}
}

// Socket is the unix socket the kubelet serves on.
func (k *Kubelet) Socket() string { return k.socket }

// Start serves on the socket (removing a stale one first); after Stop it
// serves again on the same socket with the same table, as a restarted
// kubelet does.
func (k *Kubelet) Start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.srv != nil {
		return fmt.Errorf("pod resources socket %s: already serving", k.socket)
	}
	if err := os.Remove(k.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pod resources socket %s: %w", k.socket, err)
	}
	ln, err := net.Listen("unix", k.socket)
	if err != nil {
		return fmt.Errorf("pod resources socket %s: %w", k.socket, err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, server{k: k})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	k.srv, k.served = srv, served
	return nil
}

// Stop stops serving, ending the calls in flight: the socket goes away, as
// when the kubelet stops. It returns once the server is down, with the
// error serving ended on, if any; stopping a stopped kubelet does nothing.
func (k *Kubelet) Stop() error {
	k.mu.Lock()
	srv, served := k.srv, k.served
	k.srv, k.served = nil, nil
	k.mu.Unlock()
	if srv == nil {
		return nil
	}
	srv.Stop()
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("pod resources socket %s: serving: %w", k.socket, err)
	}
	return nil
}

// Allocate records that the kubelet gave a pod's container the devices ids
// of resource, replacing what the container held of that resource; the pod
// and container become known. With no ids the container holds nothing of
// resource (a container without devices, in a pod the kubelet knows).
func (k *Kubelet) Allocate(namespace, pod, container, resource string, ids ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := podKey{namespace, pod}
	if k.pods[key] == nil {
		k.pods[key] = map[string]map[string][]string{}
	}
	if k.pods[key][container] == nil {
		k.pods[key][container] = map[string][]string{}
	}
	if len(ids) == 0 {
		delete(k.pods[key][container], resource)
		return
	}
	k.pods[key][container][resource] = slices.Clone(ids)
}

// Delete forgets a pod and its allocations (the kubelet removed the pod).
func (k *Kubelet) Delete(namespace, pod string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.pods, podKey{namespace, pod})
}

// SetAllocatable makes ids the node's allocatable devices of resource, the
// answer of GetAllocatableResources (no ids: none).
func (k *Kubelet) SetAllocatable(resource string, ids ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(ids) == 0 {
		delete(k.allocatable, resource)
		return
	}
	k.allocatable[resource] = slices.Clone(ids)
}

// Delay makes every call wait until the returned release is called or the
// call's context ends (a slow kubelet). Release may be called more than
// once.
func (k *Kubelet) Delay() (release func()) {
	ch := make(chan struct{})
	k.mu.Lock()
	k.delay = ch
	k.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			if k.delay == ch {
				k.delay = nil
			}
			k.mu.Unlock()
			close(ch)
		})
	}
}

// Calls returns how many calls of each method the server received so far.
func (k *Kubelet) Calls() Calls {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.calls
}

// arrive counts a call and waits out a Delay. It returns with mu held, or,
// when the call's context ends first, with the context's gRPC status and mu
// not held: a server whose deadline passes answers with an error, as grpc-go
// would, and never with data (the server's deadline can pass a moment before
// the client's, and a late answer would then reach the client).
func (k *Kubelet) arrive(ctx context.Context, count *int) error {
	k.mu.Lock()
	*count++
	ch := k.delay
	k.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	k.mu.Lock()
	return nil
}

// podResources renders one pod; the caller holds mu.
func (k *Kubelet) podResources(key podKey) *podresourcesv1.PodResources {
	pr := &podresourcesv1.PodResources{Namespace: key.namespace, Name: key.name}
	ctrs := k.pods[key]
	for _, c := range slices.Sorted(maps.Keys(ctrs)) {
		cr := &podresourcesv1.ContainerResources{Name: c}
		for _, res := range slices.Sorted(maps.Keys(ctrs[c])) {
			cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: slices.Clone(ctrs[c][res])})
		}
		pr.Containers = append(pr.Containers, cr)
	}
	return pr
}

// server is the gRPC service, kept apart so that Kubelet's own methods are
// the ones a test calls.
type server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	k *Kubelet
}

var _ podresourcesv1.PodResourcesListerServer = server{}

// List implements the PodResources API.
func (s server) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k := s.k
	if err := k.arrive(ctx, &k.calls.List); err != nil {
		return nil, err
	}
	defer k.mu.Unlock()
	keys := slices.SortedFunc(maps.Keys(k.pods), func(a, b podKey) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, key := range keys {
		resp.PodResources = append(resp.PodResources, k.podResources(key))
	}
	return resp, nil
}

// Get implements the PodResources API.
func (s server) Get(ctx context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	k := s.k
	if err := k.arrive(ctx, &k.calls.Get); err != nil {
		return nil, err
	}
	defer k.mu.Unlock()
	key := podKey{req.GetPodNamespace(), req.GetPodName()}
	if _, ok := k.pods[key]; !ok {
		// The kubelet's own answer: a plain error (gRPC code Unknown).
		return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
	}
	return &podresourcesv1.GetPodResourcesResponse{PodResources: k.podResources(key)}, nil
}

// GetAllocatableResources implements the PodResources API: the devices of
// SetAllocatable, by resource name.
func (s server) GetAllocatableResources(ctx context.Context, _ *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	k := s.k
	if err := k.arrive(ctx, &k.calls.GetAllocatableResources); err != nil {
		return nil, err
	}
	defer k.mu.Unlock()
	resp := &podresourcesv1.AllocatableResourcesResponse{}
	for _, res := range slices.Sorted(maps.Keys(k.allocatable)) {
		resp.Devices = append(resp.Devices, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: slices.Clone(k.allocatable[res])})
	}
	return resp, nil
}
