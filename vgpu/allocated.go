package vgpu

import (
	"context"
	"strings"

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
type Lister = podresources.Lister

// PodResourcesAllocated is Allocated over the kubelet's PodResources v1
// API (podresources.Client on the kubelet's socket).
type PodResourcesAllocated struct{ Pods Lister }

// Allocated lists every device ID of every container of every pod.
func (p PodResourcesAllocated) Allocated(ctx context.Context) (map[string]string, error) {
	holders, err := podresources.Holders(ctx, p.Pods)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(holders))
	for id, hs := range holders {
		out[id] = strings.TrimPrefix(hs[0].String(), "pod ")
	}
	return out, nil
}

// normID makes device IDs comparable (podresources.NormID).
func normID(id string) string { return podresources.NormID(id) }
