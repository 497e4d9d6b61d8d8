package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/agenttest"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// The story's vm-vgpu nodes, and the VM that holds a vGPU on one of them.
const (
	vgpuA10  = "vgpu-a10"  // an A10, SR-IOV: a mediated device on each VF (fixture a10-vgpu)
	vgpuL40S = "vgpu-l40s" // two L40S, vGPUs on SR-IOV VFs (fixture l40s-vgpu)
	vmPID    = 4242
)

// vgpuSteps: each vm-vgpu node gets the vGPUs of its selected config, and
// the KubeVirt device plugin advertises them.
func (s *story) vgpuSteps() []step {
	return []step{
		{what: "the vGPU device manager applies each vm-vgpu node's " + names.VGPUConfigLabel + " (report and " +
			names.VGPUConfigStateLabel + ": success)", cond: func(ctx context.Context) (bool, string) {
			var got []string
			for n, want := range map[string]string{vgpuA10: "A10-4Q", vgpuL40S: "L40S-24Q"} {
				ok, detail := s.applied(ctx, n, want)
				if !ok {
					return false, detail
				}
				got = append(got, detail)
			}
			slices.Sort(got)
			return true, strings.Join(got, "; ")
		}},
		{what: "the KubeVirt device plugin advertises them to the kubelet: the A10's mdev vGPUs (one per VF) and the L40S vGPU VFs are allocatable by type",
			cond: func(ctx context.Context) (bool, string) {
				ok1, d1 := s.resourcesAre(ctx, vgpuA10, "nvidia.com/NVIDIA_A10-4Q=6")
				ok2, d2 := s.resourcesAre(ctx, vgpuL40S, "nvidia.com/NVIDIA_L40S-24Q=4")
				return ok1 && ok2, d1 + "; " + d2
			}},
	}
}

// vgpuChangeSteps: a node relabelled to another config gets its set
// changed; a vGPU a running VM holds survives a config that would remove
// it, reported, and the change goes through once the VM exits.
func (s *story) vgpuChangeSteps() []step {
	a10 := s.agents[vgpuA10]
	return []step{
		{what: "relabelling " + vgpuL40S + " " + names.VGPUConfigLabel + "=L40S-12Q changes its set: 8 L40S-12Q VFs allocatable, " +
			"L40S-24Q gone, in the KubeVirt CR too",
			do: func(ctx context.Context) error { return s.relabel(ctx, vgpuL40S, "L40S-12Q") },
			cond: func(ctx context.Context) (bool, string) {
				if ok, d := s.applied(ctx, vgpuL40S, "L40S-12Q"); !ok {
					return false, d
				}
				if ok, d := s.resourcesAre(ctx, vgpuL40S, "nvidia.com/NVIDIA_L40S-12Q=8"); !ok {
					return false, d
				}
				pci, _, err := s.permitted(ctx)
				if err != nil {
					return false, err.Error()
				}
				has := func(r string) bool {
					return slices.ContainsFunc(pci, func(e string) bool { return strings.HasPrefix(e, r+"(") })
				}
				if !has("nvidia.com/NVIDIA_L40S-12Q") || has("nvidia.com/NVIDIA_L40S-24Q") {
					return false, "KubeVirt CR pciHostDevices: " + strings.Join(pci, " ")
				}
				return s.appliedEvent(ctx, vgpuL40S, "L40S-12Q")
			}},
		{what: "a VM holds one of " + vgpuA10 + "'s A10-4Q vGPUs; relabelled " + names.VGPUConfigLabel + "=A10-8Q, the change " +
			"is refused: state failed, a Warning event naming the VM",
			do: func(ctx context.Context) error {
				uuid, group, err := startVM(a10, vgpuA10, vmPID, "NVIDIA A10-4Q")
				if err != nil {
					return err
				}
				s.say("VM started on %s: qemu-kvm (pid %d) holds vGPU %s (%s)", vgpuA10, vmPID, uuid, group)
				return s.relabel(ctx, vgpuA10, "A10-8Q")
			},
			cond: func(ctx context.Context) (bool, string) {
				nd := s.node(ctx, vgpuA10)
				if nd == nil || nd.Labels[names.VGPUConfigStateLabel] != vgpu.StateFailed {
					return false, fmt.Sprintf("%s: %s is not %s yet", vgpuA10, names.VGPUConfigStateLabel, vgpu.StateFailed)
				}
				e, err := s.event(ctx, vgpuA10, corev1.EventTypeWarning, vgpu.EventRefused, "qemu-kvm")
				if err != nil {
					return false, err.Error()
				}
				if e == nil || !strings.Contains(e.Message, "in use") {
					return false, "no Warning event " + vgpu.EventRefused + " naming qemu-kvm yet"
				}
				return true, e.Reason + ": " + e.Message
			}},
		{what: "the VM's vGPU survives: all six A10-4Q stay allocatable, nothing written to the held device; the validator " +
			"and the SandboxGPUNode report " + vgpuA10 + " not ready, with the reason",
			cond: func(ctx context.Context) (bool, string) {
				if ok, d := s.resourcesAre(ctx, vgpuA10, "nvidia.com/NVIDIA_A10-4Q=6"); !ok {
					return false, d
				}
				if v := a10.Kernel().Violations(); len(v) > 0 {
					return false, "the simulated kernel recorded writes to a held device: " + strings.Join(v, "; ")
				}
				r := a10.ValidatorReport()
				i := slices.IndexFunc(r.Problems, func(p string) bool { return strings.Contains(p, "in use") })
				if r.Ready || i < 0 {
					return false, fmt.Sprintf("validator: ready %v, problems %v", r.Ready, r.Problems)
				}
				var st v1alpha1.SandboxGPUNode
				if err := s.c.Get(ctx, client.ObjectKey{Name: vgpuA10}, &st); err != nil {
					return false, fmt.Sprintf("SandboxGPUNode %s: %v", vgpuA10, err)
				}
				if st.Status.State == v1alpha1.StateReady || !strings.Contains(st.Status.Message, names.Validator) {
					return false, fmt.Sprintf("SandboxGPUNode %s: %s: %s", vgpuA10, st.Status.State, st.Status.Message)
				}
				return true, fmt.Sprintf("validator: %s; SandboxGPUNode %s: %s", r.Problems[i], st.Status.State, st.Status.Message)
			}},
		{what: fmt.Sprintf("the VM exits: the manager's next pass (resync, %s here) applies A10-8Q: 3 allocatable, "+
			"A10-4Q gone, %s ready again", vgpuResync, vgpuA10),
			do: func(ctx context.Context) error {
				s.say("VM on %s exits: qemu-kvm (pid %d) closes its vGPU", vgpuA10, vmPID)
				return stopVM(a10, vgpuA10, vmPID)
			},
			cond: func(ctx context.Context) (bool, string) {
				if ok, d := s.applied(ctx, vgpuA10, "A10-8Q"); !ok {
					return false, d
				}
				if ok, d := s.resourcesAre(ctx, vgpuA10, "nvidia.com/NVIDIA_A10-8Q=3"); !ok {
					return false, d
				}
				var st v1alpha1.SandboxGPUNode
				if err := s.c.Get(ctx, client.ObjectKey{Name: vgpuA10}, &st); err != nil {
					return false, fmt.Sprintf("SandboxGPUNode %s: %v", vgpuA10, err)
				}
				if st.Status.State != v1alpha1.StateReady {
					return false, fmt.Sprintf("SandboxGPUNode %s: %s: %s", vgpuA10, st.Status.State, st.Status.Message)
				}
				return s.appliedEvent(ctx, vgpuA10, "A10-8Q")
			}},
	}
}

// relabel selects another vGPU config on a Node.
func (s *story) relabel(ctx context.Context, node, config string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{names.VGPUConfigLabel: config}}})
	if _, err := s.cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("node %s: label %s=%s: %w", node, names.VGPUConfigLabel, config, err)
	}
	s.say("Labelled %s %s=%q", node, names.VGPUConfigLabel, config)
	return nil
}

// applied: the node's vGPU device manager reports the config applied, and
// so does the Node's state label.
func (s *story) applied(ctx context.Context, node, config string) (bool, string) {
	r := s.agents[node].VGPUReport()
	if r == nil {
		return false, node + ": the vGPU device manager has not reported yet"
	}
	if r.Config != config || r.State != vgpu.StateSuccess {
		return false, fmt.Sprintf("%s: config %s %s, want %s success (refused %v, error %q)", node, r.Config, r.State, config, r.Refused, r.Error)
	}
	nd := s.node(ctx, node)
	if nd == nil || nd.Labels[names.VGPUConfigStateLabel] != vgpu.StateSuccess {
		return false, fmt.Sprintf("%s: %s is not %s yet", node, names.VGPUConfigStateLabel, vgpu.StateSuccess)
	}
	var gpus []string
	for _, g := range r.GPUs {
		var have []string
		for _, t := range slices.Sorted(maps.Keys(g.VGPUs)) {
			have = append(have, fmt.Sprintf("%d %s", g.VGPUs[t], t))
		}
		gpus = append(gpus, fmt.Sprintf("GPU %d %s (%s) %s", g.Index, g.Address, g.Backend, strings.Join(have, ", ")))
	}
	return true, fmt.Sprintf("%s: %s on %s", node, config, strings.Join(gpus, ", "))
}

// resourcesAre: the Node's allocatable NVIDIA resources are exactly want.
func (s *story) resourcesAre(ctx context.Context, node string, want ...string) (bool, string) {
	nd := s.node(ctx, node)
	if nd == nil {
		return false, node + ": cannot read the Node"
	}
	got := agenttest.Allocatable(nd)
	return slices.Equal(got, want), node + ": " + strings.Join(got, " ")
}

// appliedEvent finds the Normal event of the config's change on a Node.
func (s *story) appliedEvent(ctx context.Context, node, config string) (bool, string) {
	e, err := s.event(ctx, node, corev1.EventTypeNormal, vgpu.EventApplied, fmt.Sprintf("%q", config))
	if err != nil {
		return false, err.Error()
	}
	if e == nil {
		return false, fmt.Sprintf("%s: no %s event for %s yet", node, vgpu.EventApplied, config)
	}
	return true, e.Reason + ": " + e.Message
}
