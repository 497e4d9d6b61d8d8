package nri

import (
	"context"
	"sync"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
)

// Allocation is the device IDs a container holds, by resource name.
type Allocation = podresources.Allocation

// PodAllocations is a pod's allocations by container name.
type PodAllocations = podresources.PodAllocations

// PodResources is what the plugin needs from the kubelet.
type PodResources interface {
	// Get returns the allocations of one pod.
	Get(ctx context.Context, namespace, name string) (PodAllocations, error)
	// List returns the allocations of every pod, by "namespace/name".
	List(ctx context.Context) (map[string]PodAllocations, error)
}

// KubeletPodResources is the kubelet's PodResources v1 API over its unix
// socket (the shared client of internal/podresources).
type KubeletPodResources = podresources.Client

// NewKubeletPodResources connects lazily to the socket.
func NewKubeletPodResources(socket string, timeout time.Duration) (*KubeletPodResources, error) {
	return podresources.New(socket, timeout)
}

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
