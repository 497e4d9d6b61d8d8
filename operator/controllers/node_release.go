package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// inRelease reports whether the node is in the release step: releasing,
// or failed there (its release timed out; it stays failed until the
// release is done).
func inRelease(st *v1alpha1.SandboxGPUNode) bool {
	return st.Status.State == v1alpha1.StateReleasing || st.Status.State == v1alpha1.StateFailed && failCause(st) == ReasonReleaseTimedOut
}

// failCause is the reason of a failed node's Degraded condition.
func failCause(st *v1alpha1.SandboxGPUNode) string {
	if d := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionDegraded); d != nil && d.Status == metav1.ConditionTrue {
		return d.Reason
	}
	return ""
}

// release returns the host state of the config the node leaves (from) once
// its GPU pods are drained, before the operands of to (the next config;
// "" for an uninstall) start. In one Node write the operand that made that
// state (the VFIO manager, the vGPU device manager: rel) gives way to its
// release DaemonSet, and the device plugins and the validator of from stop;
// the vGPU host driver stays (workload.KeptWhileReleasing). The release is
// done when its pod is Ready: its /readyz says that nothing is left. A GPU
// or vGPU in use is never touched by it: that keeps the node releasing,
// with the release's reason (its report on the Node) in the message and
// one Warning event per reason; past the policy's drain timeout the node
// is failed (ReleaseTimedOut) and stays so until the release is done.
func (r *NodeReconciler) release(ctx context.Context, node *corev1.Node, p *v1alpha1.SandboxGPUPolicy, st *v1alpha1.SandboxGPUNode,
	from, to, rel string, rep *nodeReport) (res ctrl.Result, msg string, done bool, err error) {
	failed := st.Status.State == v1alpha1.StateFailed && failCause(st) == ReasonReleaseTimedOut
	if !failed && r.setState(st, v1alpha1.StateReleasing) {
		rep.releasing(from, to, rel)
	}
	if err := r.ensureNode(ctx, node, workload.KeptWhileReleasing(from, p), []string{rel}, from == v1alpha1.WorkloadVMVGPU); err != nil {
		return ctrl.Result{}, "", false, err
	}
	ready, err := r.readyOperands(ctx, node.Name)
	if err != nil {
		return ctrl.Result{}, "", false, err
	}
	if ready[names.ReleaseOperand(rel)] {
		rep.released(from, to, rel)
		r.Metrics.released(rel, releaseDone)
		return ctrl.Result{}, "", true, nil
	}
	why := releaseReason(node, rel)
	what := fmt.Sprintf("Releasing %s before it switches to %s", from, to)
	if to == "" {
		what = fmt.Sprintf("Uninstalling: releasing %s", from)
	}
	msg = fmt.Sprintf("%s: waiting for %s to %s", what, names.ReleaseOperand(rel), releaseGoal(rel))
	if why != "" {
		msg += "; it reports: " + strings.TrimRight(why, ".")
	}
	msg += "."
	timeout := drainTimeout(p)
	if failed || st.Status.Since != nil && r.Now().Sub(st.Status.Since.Time) > timeout {
		msg = fmt.Sprintf("The release of %s timed out after %s: %s did not %s", from, timeout, names.ReleaseOperand(rel), releaseGoal(rel))
		if why != "" {
			msg += "; it reports: " + strings.TrimRight(why, ".")
		}
		msg += "."
		if r.setState(st, v1alpha1.StateFailed) {
			rep.releaseTimedOut(from, timeout, rel, why)
			r.Metrics.released(rel, releaseTimedOut)
		} else {
			rep.failReason = ReasonReleaseTimedOut
		}
		return ctrl.Result{RequeueAfter: r.Requeue}, msg, false, nil
	}
	if why != "" && !strings.Contains(st.Status.Message, why) {
		rep.releaseRefused(from, rel, why)
		r.Metrics.released(rel, releaseRefused)
	}
	// The release pod's readiness and its report on the Node wake the
	// node; the requeue is a safety net (and the clock of the timeout).
	return ctrl.Result{RequeueAfter: r.Requeue}, msg, false, nil
}

// releaseGoal says what a release of rel does, after "to".
func releaseGoal(rel string) string {
	if rel == names.VGPUDeviceManager {
		return "remove every vGPU and disable the SR-IOV VFs"
	}
	return "return every GPU to its host driver"
}

// releaseReason is why the release of rel is not done, as its release
// daemon reported on the Node ("" when it reported nothing, or done).
func releaseReason(node *corev1.Node, rel string) string {
	v, ok := node.Annotations[names.ReleaseReportAnnotation(rel)]
	if !ok {
		return ""
	}
	r, err := wire.ParseReleaseReport(v)
	if err != nil {
		return "its report cannot be read: " + errText(err)
	}
	if r.Done {
		return ""
	}
	return r.Reason
}

// drainTimeout is the policy's drain timeout, which bounds a release too.
func drainTimeout(p *v1alpha1.SandboxGPUPolicy) time.Duration {
	if p.Spec.Drain.Timeout != nil {
		return p.Spec.Drain.Timeout.Duration
	}
	return defaultDrainTimeout
}
