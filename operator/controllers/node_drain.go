package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// defaultDrainTimeout applies when the policy sets none.
const defaultDrainTimeout = 10 * time.Minute

// drain waits for (or, by policy, evicts) the pods holding GPU resources of
// the old config; past the timeout the node is failed, and stays failed
// while those pods run (it proceeds when they are gone, and a new config
// starts a new drain).
func (r *NodeReconciler) drain(ctx context.Context, node *corev1.Node, p *v1alpha1.SandboxGPUPolicy, st *v1alpha1.SandboxGPUNode, holders []corev1.Pod, from, to string, rep *nodeReport) (ctrl.Result, string, error) {
	pods := nameList(podNames(holders))
	timeout := drainTimeout(p)
	timedOut := st.Status.Since != nil && r.Now().Sub(st.Status.Since.Time) > timeout
	if st.Status.State == v1alpha1.StateFailed || timedOut {
		msg := fmt.Sprintf("The drain from %s to %s timed out after %s with %s still running: %s.", from, to, timeout, plural(len(holders), "GPU pod"), pods)
		if r.setState(st, v1alpha1.StateFailed) {
			rep.drainTimedOut(from, to, timeout, holders)
		} else {
			rep.failReason = ReasonDrainTimedOut
		}
		return ctrl.Result{RequeueAfter: r.Requeue}, msg, nil
	}
	if p.Spec.Drain.Evict {
		if msg := r.evict(ctx, node, st, holders, from, to); msg != "" {
			return ctrl.Result{RequeueAfter: r.Requeue}, msg, nil
		}
	}
	return ctrl.Result{RequeueAfter: r.Requeue}, fmt.Sprintf("Draining from %s to %s: waiting for %s to finish: %s.", from, to, plural(len(holders), "GPU pod"), pods), nil
}

// evict evicts the GPU pods not already on their way out (the eviction API,
// so PodDisruptionBudgets apply), with an event for each. It returns a
// message when an eviction failed; a Warning event says so when that
// message is new.
func (r *NodeReconciler) evict(ctx context.Context, node *corev1.Node, st *v1alpha1.SandboxGPUNode, holders []corev1.Pod, from, to string) string {
	for i := range holders {
		pod := &holders[i]
		if pod.DeletionTimestamp != nil {
			continue // evicted (or deleted) already: terminating
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
		err := r.SubResource("eviction").Create(ctx, pod, ev)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			msg := fmt.Sprintf("Could not evict GPU pod %s/%s from node %s: %s.", pod.Namespace, pod.Name, node.Name, errText(err))
			if !strings.HasSuffix(st.Status.Message, msg) {
				r.event(node, pod, nodeEvent{warning: true, reason: EventEvictionFailed, action: "Evict", note: msg})
			}
			return msg
		}
		r.event(node, pod, nodeEvent{reason: EventEvicted, action: "Evict",
			note: fmt.Sprintf("Evicted GPU pod %s/%s from node %s, which switches from %s to %s.", pod.Namespace, pod.Name, node.Name, from, to)})
	}
	return ""
}

// gpuHolders lists the node's pods that hold a GPU resource of config.
func (r *NodeReconciler) gpuHolders(ctx context.Context, node, config string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	var err error
	if r.APIReader != nil {
		err = r.APIReader.List(ctx, &pods, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.nodeName", node)})
	} else {
		err = r.List(ctx, &pods, client.MatchingFields{podNodeIndex: node})
	}
	if err != nil {
		return nil, fmt.Errorf("node %s: list pods: %w", node, err)
	}
	var out []corev1.Pod
	for i := range pods.Items {
		if workload.HoldsGPU(&pods.Items[i], config) {
			out = append(out, pods.Items[i])
		}
	}
	return out, nil
}
