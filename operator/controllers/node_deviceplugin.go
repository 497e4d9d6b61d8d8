package controllers

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// EventDevicePluginRestart: on a mixed node, the split gave GPUs back to
// containers and NVIDIA's device plugin, which finds GPUs only at its
// start, is restarted to serve them.
const EventDevicePluginRestart = "DevicePluginRestart"

// followSplit keeps NVIDIA's device plugin on a mixed node serving the
// split's container GPUs, given the operands staged for labelling; it
// returns those to label now. The device plugin lists GPUs only at its
// start, and NVML holds every GPU it serves open.
//   - GPUs moving to VMs: the VFIO manager is not ready until they moved,
//     and the plugin, which runs only while it is ready (Staged), stops.
//     But a VFIO manager that waits only for GPUs VMs still hold, on their
//     way to containers, does not stop it: the plugin cannot see those
//     (on vfio) and new container pods go on getting the others.
//   - GPUs joining the container GPUs on the host driver (beyond
//     status.containerGPUs, those it started with): its deploy label goes
//     until its pod is gone (so that the DaemonSet controller sees the
//     change and starts a new pod), then comes back, and the GPUs it starts
//     with are recorded.
//
// present says which operands have a pod on the node.
func (r *NodeReconciler) followSplit(node *corev1.Node, st *v1alpha1.SandboxGPUNode, want, staged []string, present map[string]bool, rep *nodeReport) []string {
	dp := names.NVIDIADevicePlugin
	if !slices.Contains(want, names.VFIOManager) || !slices.Contains(want, dp) {
		st.Status.ContainerGPUs = nil // not a mixed node running it
		return staged
	}
	withoutDP := func() []string {
		return slices.DeleteFunc(slices.Clone(staged), func(o string) bool { return o == dp })
	}
	split, reported := nodeSplit(node)
	current := reported && strings.TrimSpace(split.Declared) == strings.TrimSpace(node.Annotations[names.VMGPUsAnnotation])
	waitsForVMs := current && !split.Ready && len(split.Left) > 0 && joinedGPUs(split.Container, split.Left) == nil
	if !slices.Contains(staged, dp) {
		if !waitsForVMs || node.Labels[names.DeployLabel(names.VFIOManager)] != "true" {
			return staged // the split is being changed: it is stopped
		}
		staged = append(slices.Clone(staged), dp)
	}
	onHost := slices.DeleteFunc(slices.Clone(split.Container), func(a string) bool { return slices.Contains(split.Left, a) })
	if node.Labels[names.DeployLabel(dp)] == "true" {
		joined := joinedGPUs(st.Status.ContainerGPUs, onHost)
		if !current || !split.Ready && !waitsForVMs || len(joined) == 0 {
			return staged
		}
		rep.add(false, EventDevicePluginRestart, "Restart", fmt.Sprintf("Node %s: %s joined the container GPUs; NVIDIA's device plugin finds GPUs only at its start, so it restarts to serve them.",
			node.Name, nameList(joined)))
		return withoutDP()
	}
	if present[dp] {
		return withoutDP() // the old pod is still there
	}
	if !reported {
		onHost = nil
	}
	st.Status.ContainerGPUs = onHost
	return staged
}

// nodeSplit reads the VFIO manager's split report on the node.
func nodeSplit(node *corev1.Node) (wire.SplitReport, bool) {
	v, ok := node.Annotations[names.VMGPUsReportAnnotation]
	if !ok {
		return wire.SplitReport{}, false
	}
	s, err := wire.ParseSplitReport(v)
	return s, err == nil
}

// joinedGPUs lists the GPUs of now that were not in before.
func joinedGPUs(before, now []string) []string {
	var out []string
	for _, a := range now {
		if !slices.Contains(before, a) {
			out = append(out, a)
		}
	}
	return out
}
