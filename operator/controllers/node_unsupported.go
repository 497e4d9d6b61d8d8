package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// ReasonUnsupportedConfig: the node asks for a workload config the
// policy's mode cannot serve (vm-vgpu in Kata mode: Kata takes no vGPU).
// It is the node's Ready, Progressing and Degraded reason and the reason of
// the Warning event on the Node.
const ReasonUnsupportedConfig = "UnsupportedWorkloadConfig"

// ReasonDriverChangeRefused: the node asks for a config that needs the
// other NVIDIA host driver than the one it reports, and the operator does
// not change drivers there (workload.DriverRefusal): vm-vgpu on the
// data-centre driver, or container on a vGPU host driver installed on the
// host, without the policy's vgpuManager.
const ReasonDriverChangeRefused = "DriverChangeRefused"

// unsupported handles a node whose desired config the policy's mode cannot
// serve, or whose NVIDIA driver it cannot change to: it is reported
// (failed, Degraded=True with reason, a Warning event naming the node) and never set up for something else:
// it does not silently become a passthrough node. Nothing is drained for a
// switch that cannot happen: a node that ran another config the mode serves
// keeps it, with its operands (its workloads keep running); any other node
// runs no operand and is left unconfigured. It moves on by itself once the
// label or the policy changes.
func (r *NodeReconciler) unsupported(ctx context.Context, node *corev1.Node, p *v1alpha1.SandboxGPUPolicy, st *v1alpha1.SandboxGPUNode,
	desired, why, reason string, rep *nodeReport) (ctrl.Result, string, error) {
	keep := st.Status.AppliedConfig
	if keep == desired || workload.Unsupported(keep, p) != "" {
		keep = ""
	}
	if err := r.ensureLabels(ctx, node, workload.NodeOperands(node, keep, p)); err != nil {
		return ctrl.Result{}, "", err
	}
	st.Status.AppliedConfig = keep
	if t := st.Status.Transition; t != nil && t.Completed == nil {
		st.Status.Transition = nil // nothing is switching
	}
	msg := fmt.Sprintf("Node %s asks for %s, but %s.", node.Name, desired, why)
	if keep != "" {
		msg += fmt.Sprintf(" It keeps running %s with its operands.", keep)
	} else {
		msg += " It is left unconfigured."
	}
	d := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionDegraded)
	reported := d != nil && d.Status == metav1.ConditionTrue && d.Reason == reason && d.Message == msg
	r.setState(st, v1alpha1.StateFailed)
	rep.failReason = reason
	if !reported {
		rep.add(true, reason, "Configure", msg)
	}
	// No requeue: a change of the label or the policy wakes the node.
	return ctrl.Result{}, msg, nil
}
