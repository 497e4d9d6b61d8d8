package controllers

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// ReleaseFinalizer is on the policy while it lives: deleting it (helm
// uninstall, kubectl delete) first returns every GPU the product moved
// (the node reconciler releases each node, never touching a GPU in use),
// and the operator removes the finalizer once every GPU node is released.
// Until then the operand DaemonSets, which the policy owns, stay: the
// release DaemonSets do the work.
const ReleaseFinalizer = v1alpha1.ReleaseFinalizer

// Reasons of the policy's Ready condition while it is being deleted.
const (
	ReasonUninstalling = "Uninstalling"
	ReasonUninstalled  = "Uninstalled"
)

// ensureFinalizer adds ReleaseFinalizer to a policy that is not being
// deleted (one write in the policy's life).
func (r *PolicyReconciler) ensureFinalizer(ctx context.Context, p *v1alpha1.SandboxGPUPolicy) error {
	if !p.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(p, ReleaseFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(p, ReleaseFinalizer)
	if err := r.Patch(ctx, p, patch); err != nil {
		return fmt.Errorf("add finalizer %s: %w", ReleaseFinalizer, err)
	}
	return nil
}

// removeFinalizer lets the policy go (and with it, by garbage collection,
// the operand DaemonSets and node states).
func (r *PolicyReconciler) removeFinalizer(ctx context.Context, p *v1alpha1.SandboxGPUPolicy) error {
	if !controllerutil.ContainsFinalizer(p, ReleaseFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(p, ReleaseFinalizer)
	if err := r.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer %s: %w", ReleaseFinalizer, err)
	}
	return nil
}

// uninstallStatus reports, in the Ready condition, how the release of the
// GPU nodes goes while the policy is being deleted, naming each node not
// released yet with its state and message; it says whether every one is.
func (r *PolicyReconciler) uninstallStatus(ctx context.Context, p *v1alpha1.SandboxGPUPolicy) (bool, error) {
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		return false, fmt.Errorf("list nodes: %w", err)
	}
	gpu := map[string]bool{}
	for i := range nodes.Items {
		if workload.IsGPUNode(&nodes.Items[i]) {
			gpu[nodes.Items[i].Name] = true
		}
	}
	var states v1alpha1.SandboxGPUNodeList
	if err := r.List(ctx, &states); err != nil {
		return false, fmt.Errorf("list node states: %w", err)
	}
	var left []string
	released := 0
	for _, st := range states.Items {
		if !gpu[st.Name] {
			continue // the node is gone; so is what it had
		}
		if st.Status.State == v1alpha1.StateReleased {
			released++
			continue
		}
		state := st.Status.State
		if state == "" {
			state = v1alpha1.StatePending
		}
		what := st.Name + " (" + state
		if st.Status.Message != "" {
			what += ": " + errTextOf(st.Status.Message)
		}
		left = append(left, what+")")
	}
	sort.Strings(left)
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: p.Generation}
	if len(left) == 0 {
		cond.Reason = ReasonUninstalled
		cond.Message = fmt.Sprintf("The policy is being deleted: every GPU the product moved is returned (%s released).", plural(released, "GPU node"))
	} else {
		cond.Reason = ReasonUninstalling
		cond.Message = fmt.Sprintf("The policy is being deleted: %d of %s released; waiting for %s.", released, plural(released+len(left), "GPU node"), nameList(left))
	}
	meta.SetStatusCondition(&p.Status.Conditions, cond)
	return len(left) == 0, nil
}

// errTextOf is a sentence to put inside another (no final period).
func errTextOf(s string) string {
	for len(s) > 0 && s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}
