package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// containerOps and mixedOps are the operands of a container node and of a
// mixed vm-passthrough node (KubeVirt mode, the sample policy).
var (
	containerOps = []string{names.NRIPlugin, names.NVIDIADevicePlugin}
	mixedOps     = []string{names.KubeVirtDevicePlugin, names.NRIPlugin, names.NVIDIADevicePlugin, names.Validator, names.VFIOManager}
)

// mixedSteps: gpu-hgx becomes a mixed node (half its GPUs for VMs, half for
// containers), and gpu-a10 leaves vm-passthrough for container.
func (s *story) mixedSteps() []step {
	return []step{
		{what: "kubectl annotate node gpu-hgx " + names.VMGPUsAnnotation + "=4: a mixed node, 4 GPUs on vfio-pci in NUMA node 1 " +
			"for VMs, 4 on nvidia for containers (NRI plugin and NVIDIA's device plugin deployed beside the VM operands)",
			do: func(ctx context.Context) error {
				return s.annotate(ctx, "gpu-hgx", names.VMGPUsAnnotation, "4")
			},
			cond: func(ctx context.Context) (bool, string) { return s.mixed(ctx, "gpu-hgx", 4) }},
		{what: "gpu-a10 relabelled vm-passthrough -> container: the release returns its GPU to nvidia, then the container operands come",
			do: func(ctx context.Context) error {
				return s.label(ctx, "gpu-a10", names.WorkloadConfigLabel, v1alpha1.WorkloadContainer)
			},
			cond: func(ctx context.Context) (bool, string) { return s.containerNode(ctx, "gpu-a10") }},
	}
}

// annotate sets one annotation of a Node, as kubectl annotate does.
func (s *story) annotate(ctx context.Context, node, key, value string) error {
	return s.patchMeta(ctx, node, "annotations", key, value)
}

// label sets one label of a Node, as kubectl label does.
func (s *story) label(ctx context.Context, node, key, value string) error {
	return s.patchMeta(ctx, node, "labels", key, value)
}

func (s *story) patchMeta(ctx context.Context, node, field, key, value string) error {
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{field: map[string]string{key: value}}})
	if err != nil {
		return err
	}
	if err := s.c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, raw)); err != nil {
		return fmt.Errorf("node %s: set %s %s=%s: %w", node, field, key, value, err)
	}
	return nil
}

// sides lists a simulated host's GPUs on vfio (with their NUMA node) and on
// their host driver.
func (s *story) sides(node string) (vfio []string, onHost int, err error) {
	a := s.agents[node]
	for _, addr := range a.Kernel().Addresses() {
		f, err := a.Host().ReadFunction(addr)
		if err != nil {
			return nil, 0, fmt.Errorf("node %s: %w", node, err)
		}
		if f.Vendor != host.VendorNVIDIA || f.Role != host.RoleGPU || f.PhysFn != "" {
			continue
		}
		if host.IsVFIODriver(a.Kernel().DriverOf(addr)) {
			vfio = append(vfio, fmt.Sprintf("%s(numa %d)", addr, f.NUMANode))
		} else {
			onHost++
		}
	}
	return vfio, onHost, nil
}

// mixed checks a mixed node: vm GPUs on vfio, all in NUMA node 1, the rest
// on their host driver, the KubeVirt resource at vm, the VFIO manager's
// report ready, the mixed node's operands, the node ready.
func (s *story) mixed(ctx context.Context, node string, vm int) (bool, string) {
	onVFIO, onHost, err := s.sides(node)
	if err != nil {
		return false, err.Error()
	}
	detail := fmt.Sprintf("vfio: %s; on nvidia: %d", strings.Join(onVFIO, " "), onHost)
	if len(onVFIO) != vm || slices.ContainsFunc(onVFIO, func(g string) bool { return !strings.HasSuffix(g, "(numa 1)") }) {
		return false, detail
	}
	nd := s.node(ctx, node)
	if nd == nil {
		return false, node + ": cannot read the Node"
	}
	rep, err := wire.ParseSplitReport(nd.Annotations[names.VMGPUsReportAnnotation])
	if err != nil || !rep.Ready || len(rep.VM) != vm {
		return false, fmt.Sprintf("%s; report %q", detail, nd.Annotations[names.VMGPUsReportAnnotation])
	}
	if ok, d := s.resourcesAre(ctx, node, fmt.Sprintf("nvidia.com/GH100_H100_SXM5_80GB=%d", vm)); !ok {
		return false, detail + "; " + d
	}
	if ops := deployed(nd); !slices.Equal(ops, mixedOps) {
		return false, fmt.Sprintf("%s; operands %v, want %v", detail, ops, mixedOps)
	}
	return s.nodeIs(ctx, node, v1alpha1.WorkloadVMPassthrough, detail+"; operands "+strings.Join(mixedOps, ","))
}

// containerNode checks a node that left vm-passthrough: every GPU on its
// host driver, no VM resource, the container operands, ready container.
func (s *story) containerNode(ctx context.Context, node string) (bool, string) {
	onVFIO, onHost, err := s.sides(node)
	if err != nil {
		return false, err.Error()
	}
	detail := fmt.Sprintf("on nvidia: %d, on vfio: %d", onHost, len(onVFIO))
	if len(onVFIO) > 0 {
		return false, detail
	}
	if ok, d := s.resourcesAre(ctx, node); !ok {
		return false, detail + "; " + d
	}
	nd := s.node(ctx, node)
	if nd == nil {
		return false, node + ": cannot read the Node"
	}
	if ops := deployed(nd); !slices.Equal(ops, containerOps) {
		return false, fmt.Sprintf("%s; operands %v, want %v", detail, ops, containerOps)
	}
	return s.nodeIs(ctx, node, v1alpha1.WorkloadContainer, detail+"; operands "+strings.Join(containerOps, ","))
}

// nodeIs checks that the node's SandboxGPUNode is ready with config.
func (s *story) nodeIs(ctx context.Context, node, config, detail string) (bool, string) {
	var st v1alpha1.SandboxGPUNode
	if err := s.c.Get(ctx, client.ObjectKey{Name: node}, &st); err != nil {
		return false, fmt.Sprintf("SandboxGPUNode %s: %v", node, err)
	}
	ok := st.Status.State == v1alpha1.StateReady && st.Status.AppliedConfig == config && st.Status.WorkloadConfig == config
	detail = fmt.Sprintf("%s; SandboxGPUNode %s %s", detail, st.Status.State, st.Status.AppliedConfig)
	if st.Status.Message != "" {
		detail += " (" + st.Status.Message + ")"
	}
	return ok, detail
}
