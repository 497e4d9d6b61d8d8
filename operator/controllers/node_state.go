package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// NodeUIDLabel on a SandboxGPUNode is the UID of the Node it describes: a
// state left by an earlier Node of the same name is told apart by it.
const NodeUIDLabel = names.Domain + "/node-uid"

// nodeState gets (or creates) the node's SandboxGPUNode. The policy
// controls it, so that deleting the policy (helm uninstall) takes every
// node state with it, as it takes the operand DaemonSets; the Node's UID
// is kept in NodeUIDLabel. The state of a deleted Node is removed by
// Reconcile, which every state's events reach by name: so also at start
// for Nodes that went while the operator was down. A state of an earlier
// policy, or of an operator that made the Node its owner, is adopted.
func (r *NodeReconciler) nodeState(ctx context.Context, node *corev1.Node, p *v1alpha1.SandboxGPUPolicy) (*v1alpha1.SandboxGPUNode, error) {
	st := &v1alpha1.SandboxGPUNode{}
	err := r.Get(ctx, types.NamespacedName{Name: node.Name}, st)
	if err == nil && (st.Labels[NodeUIDLabel] == string(node.UID) || metav1.IsControlledBy(st, node)) {
		if st.Labels[NodeUIDLabel] == string(node.UID) && metav1.IsControlledBy(st, p) {
			return st, nil
		}
		return r.adopt(ctx, node, st, p)
	}
	if err == nil {
		// State left by an earlier node of the same name: start afresh.
		if err := r.Delete(ctx, st); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("node %s: remove stale state: %w", node.Name, err)
		}
		return nil, fmt.Errorf("node %s: stale state removed; will retry", node.Name)
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("node %s: get state: %w", node.Name, err)
	}
	st = &v1alpha1.SandboxGPUNode{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: map[string]string{NodeUIDLabel: string(node.UID)}}}
	if err := controllerutil.SetControllerReference(p, st, r.Scheme()); err != nil {
		return nil, fmt.Errorf("node %s: own state: %w", node.Name, err)
	}
	if err := r.Create(ctx, st); err != nil {
		return nil, fmt.Errorf("node %s: create state: %w", node.Name, err)
	}
	return st, nil
}

// adopt makes the policy the controller of the node's state and records
// the Node's UID on it, keeping its status.
func (r *NodeReconciler) adopt(ctx context.Context, node *corev1.Node, st *v1alpha1.SandboxGPUNode, p *v1alpha1.SandboxGPUPolicy) (*v1alpha1.SandboxGPUNode, error) {
	patch := client.MergeFrom(st.DeepCopy())
	if st.Labels == nil {
		st.Labels = map[string]string{}
	}
	st.Labels[NodeUIDLabel] = string(node.UID)
	st.OwnerReferences = nil
	if err := controllerutil.SetControllerReference(p, st, r.Scheme()); err != nil {
		return nil, fmt.Errorf("node %s: own state: %w", node.Name, err)
	}
	old := st.ResourceVersion
	if err := r.Patch(ctx, st, patch); err != nil {
		return nil, fmt.Errorf("node %s: adopt state: %w", node.Name, err)
	}
	r.fence.wrote(node.Name, old)
	return st, nil
}
