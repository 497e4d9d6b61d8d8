package vfio

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
)

// Allocations reports the device IDs the kubelet has allocated to pods
// (podresources.Holders over its PodResources socket). A function
// allocated to a pod is in use even while nothing has it open yet: a VM
// pod that is still starting must keep its GPU.
type Allocations func(ctx context.Context) (map[string][]podresources.Holder, error)

// kubeletIDs are the IDs a device plugin may advertise a function under:
// for VM resources its PCI address (KubeVirt), its IOMMU group or its
// iommufd cdev (Kata); for NVIDIA's container resources (nvidia.com/gpu,
// .shared, mig-*) the GPU's UUID and its index among the node's NVIDIA GPUs.
type kubeletIDs struct {
	vm, gpu []string
}

// idsOf lists f's kubelet IDs; index is f's position among the NVIDIA GPUs
// (-1 when it is not one).
func idsOf(h HostView, f *host.Function, index int) kubeletIDs {
	ids := kubeletIDs{vm: []string{string(f.Address)}}
	if f.IOMMUGroup != host.NoGroup {
		ids.vm = append(ids.vm, strconv.Itoa(f.IOMMUGroup))
	}
	ids.vm = append(ids.vm, f.VFIODevices...)
	if uuid, ok := h.GPUUUID(f.Address); ok {
		ids.gpu = append(ids.gpu, uuid)
	}
	if index >= 0 {
		ids.gpu = append(ids.gpu, strconv.Itoa(index))
	}
	return ids
}

// gpuIndexes numbers the NVIDIA GPUs (physical functions) by PCI address,
// as NVML and NVIDIA's device plugin do.
func gpuIndexes(snap *host.Snapshot) map[host.Address]int {
	out := map[host.Address]int{}
	for _, f := range snap.Functions { // sorted by address
		if f.Vendor == host.VendorNVIDIA && f.Role == host.RoleGPU && f.PhysFn == "" {
			out[f.Address] = len(out)
		}
	}
	return out
}

// allocated lists the pods the kubelet gave the function to.
func (ids kubeletIDs) allocated(holders map[string][]podresources.Holder) []string {
	var reasons []string
	seen := map[string]bool{}
	add := func(id string, h podresources.Holder) {
		r := fmt.Sprintf("in use: allocated as %s to %s", id, h)
		if !seen[r] {
			seen[r] = true
			reasons = append(reasons, r)
		}
	}
	for _, id := range ids.vm {
		for _, h := range holders[podresources.NormID(id)] {
			if !names.ContainerGPUResource(h.Resource) { // IDs are GPU UUIDs or indexes: an index must not match a VM resource's IOMMU group of the same number
				add(id, h)
			}
		}
	}
	for _, id := range ids.gpu {
		for _, h := range holders[podresources.NormID(id)] {
			if names.ContainerGPUResource(h.Resource) || strings.HasPrefix(strings.ToLower(id), "gpu-") {
				add(id, h)
			}
		}
	}
	return reasons
}

// idleCheck is the last check before a function leaves its driver, made
// after its VFIO group is claimed (when it has one): no process holds it,
// and, when there is a kubelet to ask, no pod has it allocated (asked
// afresh: an allocation made since the plan counts).
func idleCheck(ctx context.Context, h HostView, alloc Allocations, f *host.Function, ids kubeletIDs) error {
	if err := h.CheckIdle(f); err != nil {
		return err
	}
	if alloc == nil {
		return nil
	}
	holders, err := alloc(ctx)
	if err != nil {
		return fmt.Errorf("in use: cannot tell whether %s is allocated to a pod: %w", f.Address, err)
	}
	if reasons := ids.allocated(holders); len(reasons) > 0 {
		return fmt.Errorf("%s", strings.Join(reasons, "; "))
	}
	return nil
}
