package vgpu

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
)

// Allocated tells which device IDs the kubelet has given to pods: mdev
// UUIDs and VF addresses, as the KubeVirt device plugin advertises them.
// A vGPU allocated to a pod is in use even while no process holds it (the
// VM is starting, or stopped but still scheduled).
type Allocated interface {
	// Allocated maps each allocated device ID to who holds it
	// ("namespace/pod container resource").
	Allocated(ctx context.Context) (map[string]string, error)
}

// AllocatedFunc adapts a function to Allocated.
type AllocatedFunc func(ctx context.Context) (map[string]string, error)

// Allocated calls f.
func (f AllocatedFunc) Allocated(ctx context.Context) (map[string]string, error) { return f(ctx) }

// Lister is the part of the kubelet PodResources client Allocated needs.
type Lister interface {
	List(ctx context.Context) (map[string]podresources.PodAllocations, error)
}

// PodResourcesAllocated is Allocated over the kubelet's PodResources v1
// API (podresources.Client on the kubelet's socket).
type PodResourcesAllocated struct{ Pods Lister }

// Allocated lists every device ID of every container of every pod.
func (p PodResourcesAllocated) Allocated(ctx context.Context) (map[string]string, error) {
	pods, err := p.Pods.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	keys := make([]string, 0, len(pods))
	for k := range pods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, pod := range keys {
		for ctr, alloc := range pods[pod] {
			for res, ids := range alloc {
				for _, id := range ids {
					if _, ok := out[normID(id)]; !ok {
						out[normID(id)] = fmt.Sprintf("%s container %s (%s)", pod, ctr, res)
					}
				}
			}
		}
	}
	return out, nil
}

// normID makes device IDs comparable: UUIDs lower case, PCI addresses in
// canonical form.
func normID(id string) string {
	if a, err := host.ParseAddress(id); err == nil {
		return string(a)
	}
	return strings.ToLower(strings.TrimSpace(id))
}
