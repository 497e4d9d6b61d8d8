// Package nritest holds what the NRI plugin's tests share: a kubelet
// PodResources v1 server on a real unix socket, serving a table the test
// changes at run time.
package nritest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources is a fake kubelet PodResources server. Its answers follow
// the kubelet's: Get of an unknown pod fails with "pod X in namespace Y not
// found".
type PodResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	Socket string
	mu     sync.Mutex
	pods   map[string]map[string]map[string][]string // ns/name -> container -> resource -> ids
	gets   atomic.Int64
	delay  chan struct{} // while set, Get and List wait for it to close
	lists  atomic.Int64
	srv    *grpc.Server
}

// StartPodResources serves on dir/kubelet.sock until the test ends.
func StartPodResources(tb testing.TB, dir string) *PodResources {
	tb.Helper()
	f := &PodResources{Socket: filepath.Join(dir, "kubelet.sock"), pods: map[string]map[string]map[string][]string{}}
	f.Start(tb)
	tb.Cleanup(f.Stop)
	return f
}

// Start (re)starts serving on the socket.
func (f *PodResources) Start(tb testing.TB) {
	tb.Helper()
	_ = os.Remove(f.Socket)
	ln, err := net.Listen("unix", f.Socket)
	if err != nil {
		tb.Fatalf("pod resources socket: %v", err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, f)
	f.mu.Lock()
	f.srv = srv
	f.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// Stop stops serving (the socket goes away, as when the kubelet stops).
func (f *PodResources) Stop() {
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

// Set gives a pod's container devices of a resource (no ids: the container
// exists without devices).
func (f *PodResources) Set(ns, pod, container, resource string, ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := ns + "/" + pod
	if f.pods[key] == nil {
		f.pods[key] = map[string]map[string][]string{}
	}
	if f.pods[key][container] == nil {
		f.pods[key][container] = map[string][]string{}
	}
	if len(ids) > 0 {
		f.pods[key][container][resource] = ids
	}
}

// Delete forgets a pod.
func (f *PodResources) Delete(ns, pod string) {
	f.mu.Lock()
	delete(f.pods, ns+"/"+pod)
	f.mu.Unlock()
}

// Delay makes Get and List block until the returned release is called (a
// slow kubelet).
func (f *PodResources) Delay() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.delay = ch
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.delay = nil
			f.mu.Unlock()
			close(ch)
		})
	}
}

func (f *PodResources) wait(ctx context.Context) {
	f.mu.Lock()
	ch := f.delay
	f.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// Calls returns the number of Get and List calls so far.
func (f *PodResources) Calls() (gets, lists int64) { return f.gets.Load(), f.lists.Load() }

func (f *PodResources) pod(key string) *podresourcesv1.PodResources {
	ns, name, _ := strings.Cut(key, "/")
	out := &podresourcesv1.PodResources{Name: name, Namespace: ns}
	ctrs := f.pods[key]
	for _, c := range slices.Sorted(maps.Keys(ctrs)) {
		cr := &podresourcesv1.ContainerResources{Name: c}
		for _, r := range slices.Sorted(maps.Keys(ctrs[c])) {
			cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{ResourceName: r, DeviceIds: ctrs[c][r]})
		}
		out.Containers = append(out.Containers, cr)
	}
	return out
}

// List implements the kubelet API.
func (f *PodResources) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	f.lists.Add(1)
	f.wait(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, k := range slices.Sorted(maps.Keys(f.pods)) {
		resp.PodResources = append(resp.PodResources, f.pod(k))
	}
	return resp, nil
}

// Get implements the kubelet API.
func (f *PodResources) Get(ctx context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	f.gets.Add(1)
	f.wait(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	key := req.PodNamespace + "/" + req.PodName
	if _, ok := f.pods[key]; !ok {
		return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
	}
	return &podresourcesv1.GetPodResourcesResponse{PodResources: f.pod(key)}, nil
}
