package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// configure labels the node for its desired config's operands (in one
// write that also ends a release: its label and report go) and waits for
// them to be ready: configuring, then ready.
func (r *NodeReconciler) configure(ctx context.Context, node *corev1.Node, p *v1alpha1.SandboxGPUPolicy, st *v1alpha1.SandboxGPUNode, desired string, rep *nodeReport) (ctrl.Result, string, error) {
	applied := st.Status.AppliedConfig
	want := workload.NodeOperands(node, desired, p)
	ready, present, err := r.operandPods(ctx, node.Name)
	if err != nil {
		return ctrl.Result{}, "", err
	}
	// An operand whose prerequisite is not ready yet (the vGPU device
	// manager, the vGPU host driver) is labelled once it is.
	labelled := map[string]bool{}
	for _, o := range want {
		labelled[o] = node.Labels[names.DeployLabel(o)] == "true"
	}
	staged := r.followSplit(node, st, want, workload.Staged(want, ready, labelled), present, rep)
	// While the operator changes the node's driver, the operands that need
	// the new one start once the node reports it (a running one stays).
	held, driverWhy := workload.DriverHeld(node, desired, p)
	staged = slices.DeleteFunc(staged, func(o string) bool { return slices.Contains(held, o) && !labelled[o] })
	if err := r.ensureNode(ctx, node, staged, nil, leftVGPU(st, desired)); err != nil {
		return ctrl.Result{}, "", err
	}
	if applied != desired {
		st.Status.AppliedConfig = desired
		r.setState(st, v1alpha1.StateConfiguring)
		rep.configuring(applied, desired, want)
	}
	var notReady []string
	for _, o := range want {
		if !ready[o] {
			notReady = append(notReady, o)
		}
	}
	if len(notReady) > 0 {
		was := st.Status.State
		if r.setState(st, v1alpha1.StateConfiguring) {
			rep.operandsNotReady(desired, notReady, was == v1alpha1.StateReady)
		}
		if waiting := heldBack(held, labelled); len(waiting) > 0 {
			msg := fmt.Sprintf("Configuring %s: waiting for %s before %s start.", desired, driverWhy, nameList(waiting))
			// One event per wait: the driver reported may change meanwhile.
			if awaited, _, _ := strings.Cut(driverWhy, " ("); !strings.Contains(st.Status.Message, awaited) {
				rep.waitingForDriver(desired, driverWhy, waiting)
			}
			// The discovery agent's label wakes the node; the requeue is a
			// safety net.
			return ctrl.Result{RequeueAfter: 12 * r.Requeue}, msg, nil
		}
		// Operand pods are watched: their readiness wakes the node. The
		// requeue is only a safety net, slow so that thousands of nodes
		// waiting for operands do not keep the queue busy.
		return ctrl.Result{RequeueAfter: 12 * r.Requeue}, fmt.Sprintf("Configuring %s: waiting for operands to be ready: %s.", desired, nameList(notReady)), nil
	}
	if r.setState(st, v1alpha1.StateReady) {
		rep.ready(desired, completeTransition(st, r.Now()))
	}
	return ctrl.Result{}, "", nil
}

// leftVGPU reports whether the node left vm-vgpu in its last change: the
// vGPU device manager's nvidia.com/vgpu.config.state label is stale then,
// and the operator removes it (again, should a terminating device manager
// write it once more).
func leftVGPU(st *v1alpha1.SandboxGPUNode, desired string) bool {
	t := st.Status.Transition
	return desired != v1alpha1.WorkloadVMVGPU && t != nil && t.From == v1alpha1.WorkloadVMVGPU
}

// heldBack lists the held operands not started yet.
func heldBack(held []string, labelled map[string]bool) []string {
	var out []string
	for _, o := range held {
		if !labelled[o] {
			out = append(out, o)
		}
	}
	return out
}
