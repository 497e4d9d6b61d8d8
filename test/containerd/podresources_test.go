package containerd

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/test/internal/e2e"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podKey names a pod as the kubelet's PodResources API does.
type podKey struct{ namespace, name string }

// fakeKubelet is the kubelet's PodResources v1 API on a real unix socket, serving a table the test
// changes at run time: namespace/pod -> container -> resource -> device IDs. Pods in the table
// without devices are pods the kubelet knows (List and Get return them with their containers); pods
// not in the table are unknown (Get answers "not found", like the kubelet).
type fakeKubelet struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	socket      string
	allocatable map[string][]string // resource -> device IDs

	mu    sync.Mutex
	pods  map[podKey]map[string]map[string][]string
	calls map[string]int // method -> calls
}

// startFakeKubelet serves PodResources on socket until the end of the test.
func startFakeKubelet(t *testing.T, socket string, allocatable map[string][]string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{socket: socket, allocatable: allocatable, pods: map[podKey]map[string]map[string][]string{}, calls: map[string]int{}}
	lis, err := net.Listen("unix", socket)
	require.NoError(t, err, "PodResources socket")
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, k)
	e2e.Serve(t, "PodResources server", srv, lis)
	return k
}

// setPod makes the pod known with containers ctrs and no devices (replacing what it had).
func (k *fakeKubelet) setPod(namespace, name string, ctrs ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := map[string]map[string][]string{}
	for _, n := range ctrs {
		c[n] = map[string][]string{}
	}
	k.pods[podKey{namespace, name}] = c
}

// allocate gives a container of a pod the devices ids of resource (the pod becomes known).
func (k *fakeKubelet) allocate(namespace, name, ctr, resource string, ids ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := podKey{namespace, name}
	if k.pods[key] == nil {
		k.pods[key] = map[string]map[string][]string{}
	}
	if k.pods[key][ctr] == nil {
		k.pods[key][ctr] = map[string][]string{}
	}
	k.pods[key][ctr][resource] = slices.Clone(ids)
}

// callCounts returns how often each method was called.
func (k *fakeKubelet) callCounts() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.calls)
}

// podResources renders one pod; the caller holds mu.
func (k *fakeKubelet) podResources(key podKey) *podresourcesapi.PodResources {
	pr := &podresourcesapi.PodResources{Namespace: key.namespace, Name: key.name}
	ctrs := k.pods[key]
	for _, c := range slices.Sorted(maps.Keys(ctrs)) {
		cr := &podresourcesapi.ContainerResources{Name: c}
		for _, res := range slices.Sorted(maps.Keys(ctrs[c])) {
			cr.Devices = append(cr.Devices, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: slices.Clone(ctrs[c][res])})
		}
		pr.Containers = append(pr.Containers, cr)
	}
	return pr
}

func (k *fakeKubelet) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls["List"]++
	keys := slices.SortedFunc(maps.Keys(k.pods), func(a, b podKey) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	resp := &podresourcesapi.ListPodResourcesResponse{}
	for _, key := range keys {
		resp.PodResources = append(resp.PodResources, k.podResources(key))
	}
	return resp, nil
}

func (k *fakeKubelet) Get(_ context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls["Get"]++
	key := podKey{req.GetPodNamespace(), req.GetPodName()}
	if _, ok := k.pods[key]; !ok {
		// The kubelet's own answer (pkg/kubelet/apis/podresources/server_v1.go): a plain error.
		return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
	}
	return &podresourcesapi.GetPodResourcesResponse{PodResources: k.podResources(key)}, nil
}

func (k *fakeKubelet) GetAllocatableResources(context.Context, *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls["GetAllocatableResources"]++
	resp := &podresourcesapi.AllocatableResourcesResponse{}
	for _, res := range slices.Sorted(maps.Keys(k.allocatable)) {
		resp.Devices = append(resp.Devices, &podresourcesapi.ContainerDevices{ResourceName: res, DeviceIds: slices.Clone(k.allocatable[res])})
	}
	return resp, nil
}
