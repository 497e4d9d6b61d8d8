package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// uninstall returns what the product did to the node while the policy is
// being deleted (its finalizer holds it until every node is released):
// nothing is drained or evicted, and no transition slot is taken; the
// config it ran is released (GPUs back to their host driver, vGPUs
// removed: never one in use, which keeps the node releasing with the
// reason and fails it after the drain timeout, while the release goes on
// trying); then every deploy and release label, the release reports and
// the vGPU state label go, and the node is released.
func (r *NodeReconciler) uninstall(ctx context.Context, node *corev1.Node, p *v1alpha1.SandboxGPUPolicy, st *v1alpha1.SandboxGPUNode, rep *nodeReport) (ctrl.Result, string, error) {
	r.slots.forget(node.Name)
	if t := st.Status.Transition; t != nil && t.Completed == nil {
		st.Status.Transition = nil // no config is being switched to
	}
	applied := st.Status.AppliedConfig
	if st.Status.State != v1alpha1.StateReleased {
		if rel := workload.ReleaseOperand(applied, p); rel != "" {
			res, msg, done, err := r.release(ctx, node, p, st, applied, "", rel, rep)
			if err != nil || !done {
				return res, msg, err
			}
		}
	}
	if err := r.ensureNode(ctx, node, nil, nil, true); err != nil {
		return ctrl.Result{}, "", err
	}
	st.Status.AppliedConfig = ""
	if r.setState(st, v1alpha1.StateReleased) {
		rep.uninstalled(applied)
	}
	return ctrl.Result{}, "", nil
}
