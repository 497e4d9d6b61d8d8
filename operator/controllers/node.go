// Package controllers holds the operator's reconcilers.
package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// PolicyName is the one SandboxGPUPolicy the operator follows.
const PolicyName = "default"

// podNodeIndex indexes pods by spec.nodeName.
const podNodeIndex = "spec.nodeName"

// NodeReconciler moves each GPU node to its workload config: draining GPU
// users of the old config, switching the deploy labels, waiting for the
// new operands. Its progress lives in the node's SandboxGPUNode status, so
// an operator restart resumes where it stopped.
type NodeReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Namespace of the operand pods.
	Namespace string
	// Now is the clock (tests move it).
	Now func() time.Time
	// Requeue is how soon a waiting node is looked at again (default 5s).
	Requeue time.Duration
	// APIReader reads pods straight from the API server before a switch, so
	// a GPU pod bound a moment ago is never missed through cache lag.
	APIReader client.Reader
}

// SetupWithManager registers the reconciler and its watches.
func (r *NodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Requeue == 0 {
		r.Requeue = 5 * time.Second
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podNodeIndex, func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return fmt.Errorf("index pods by node: %w", err)
	}
	gpuNodes := predicate.NewPredicateFuncs(func(o client.Object) bool {
		n, ok := o.(*corev1.Node)
		return ok && workload.IsGPUNode(n)
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandbox-gpu-node").
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}). // nodes are independent
		For(&corev1.Node{}, builder.WithPredicates(gpuNodes)).
		Owns(&v1alpha1.SandboxGPUNode{}).
		Watches(&v1alpha1.SandboxGPUPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allGPUNodes)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podNode)).
		Complete(r)
}

func (r *NodeReconciler) allGPUNodes(ctx context.Context, _ client.Object) []reconcile.Request {
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range nodes.Items {
		if workload.IsGPUNode(&nodes.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: nodes.Items[i].Name}})
		}
	}
	return out
}

func podNode(_ context.Context, o client.Object) []reconcile.Request {
	if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p.Spec.NodeName}}}
	}
	return nil
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=sandbox-gpu.io,resources=sandboxgpunodes,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=sandbox-gpu.io,resources=sandboxgpunodes/status,verbs=get;update

// Reconcile implements reconcile.Reconciler.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	var node corev1.Node
	if err := r.Get(ctx, req.NamespacedName, &node); err != nil {
		if apierrors.IsNotFound(err) {
			// The node is gone: so is its state (garbage collection does the
			// same through the owner reference, later).
			st := &v1alpha1.SandboxGPUNode{ObjectMeta: metav1.ObjectMeta{Name: req.Name}}
			return ctrl.Result{}, client.IgnoreNotFound(r.Delete(ctx, st))
		}
		return ctrl.Result{}, err
	}
	if !workload.IsGPUNode(&node) {
		return ctrl.Result{}, nil
	}
	var policy v1alpha1.SandboxGPUPolicy
	if err := r.Get(ctx, types.NamespacedName{Name: PolicyName}, &policy); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	st, err := r.nodeState(ctx, &node)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := st.Status.DeepCopy()
	defer func() {
		if equality.Semantic.DeepEqual(before, &st.Status) {
			return
		}
		if err := r.Status().Update(ctx, st); err != nil && reterr == nil {
			reterr = fmt.Errorf("node %s: update state: %w", node.Name, err)
		}
	}()

	desired, invalid := workload.Config(&node, &policy)
	st.Status.WorkloadConfig = desired
	countDevices(&node, st)
	if invalid != "" && !strings.HasPrefix(before.Message, invalid) {
		r.Recorder.Eventf(&node, nil, corev1.EventTypeWarning, "InvalidWorkloadConfig", "ReadLabel", "%s", invalid)
	}
	res, msg, err := r.step(ctx, &node, &policy, st, desired)
	if invalid != "" {
		msg = strings.TrimSpace(invalid + "; " + msg)
		msg = strings.TrimSuffix(msg, ";")
	}
	st.Status.Message = msg
	return res, err
}

// nodeState gets (or creates) the node's SandboxGPUNode, owned by the Node
// so that it goes with it.
func (r *NodeReconciler) nodeState(ctx context.Context, node *corev1.Node) (*v1alpha1.SandboxGPUNode, error) {
	st := &v1alpha1.SandboxGPUNode{}
	err := r.Get(ctx, types.NamespacedName{Name: node.Name}, st)
	if err == nil && metav1.IsControlledBy(st, node) {
		return st, nil
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
	st = &v1alpha1.SandboxGPUNode{ObjectMeta: metav1.ObjectMeta{Name: node.Name}}
	if err := controllerutil.SetControllerReference(node, st, r.Scheme()); err != nil {
		return nil, err
	}
	if err := r.Create(ctx, st); err != nil {
		return nil, fmt.Errorf("node %s: create state: %w", node.Name, err)
	}
	return st, nil
}

func (r *NodeReconciler) setState(st *v1alpha1.SandboxGPUNode, state string) {
	if st.Status.State != state {
		st.Status.State = state
		now := metav1.NewTime(r.Now())
		st.Status.Since = &now
	}
}

// step runs one phase of the node's state machine and says what it waits for.
func (r *NodeReconciler) step(ctx context.Context, node *corev1.Node, p *v1alpha1.SandboxGPUPolicy, st *v1alpha1.SandboxGPUNode, desired string) (ctrl.Result, string, error) {
	applied := st.Status.AppliedConfig
	if applied != "" && applied != desired {
		r.setState(st, v1alpha1.StateDraining)
		holders, err := r.gpuHolders(ctx, node.Name, applied)
		if err != nil {
			return ctrl.Result{}, "", err
		}
		if len(holders) > 0 {
			return r.drain(ctx, p, st, holders, applied, desired)
		}
	}
	want := workload.Operands(desired, p)
	if err := r.ensureLabels(ctx, node, want); err != nil {
		return ctrl.Result{}, "", err
	}
	if st.Status.AppliedConfig != desired {
		st.Status.AppliedConfig = desired
		r.setState(st, v1alpha1.StateConfiguring)
	}
	notReady, err := r.operandsNotReady(ctx, node.Name, want)
	if err != nil {
		return ctrl.Result{}, "", err
	}
	if len(notReady) > 0 {
		r.setState(st, v1alpha1.StateConfiguring)
		// Operand pods are watched: their readiness wakes the node. The
		// requeue is only a safety net, slow so that thousands of nodes
		// waiting for operands do not keep the queue busy.
		return ctrl.Result{RequeueAfter: 12 * r.Requeue}, "waiting for operands: " + strings.Join(notReady, ", "), nil
	}
	r.setState(st, v1alpha1.StateReady)
	return ctrl.Result{}, "", nil
}

// drain waits for (or, by policy, evicts) the pods holding GPU resources of
// the old config; past the timeout the node is failed.
func (r *NodeReconciler) drain(ctx context.Context, p *v1alpha1.SandboxGPUPolicy, st *v1alpha1.SandboxGPUNode, holders []corev1.Pod, from, to string) (ctrl.Result, string, error) {
	names := make([]string, 0, len(holders))
	for _, h := range holders {
		names = append(names, h.Namespace+"/"+h.Name)
	}
	sort.Strings(names)
	timeout := 10 * time.Minute
	if p.Spec.Drain.Timeout != nil {
		timeout = p.Spec.Drain.Timeout.Duration
	}
	if st.Status.Since != nil && r.Now().Sub(st.Status.Since.Time) > timeout {
		r.setState(st, v1alpha1.StateFailed)
		return ctrl.Result{RequeueAfter: r.Requeue}, fmt.Sprintf("drain from %s to %s timed out after %s; GPU pods still running: %s", from, to, timeout, strings.Join(names, ", ")), nil
	}
	if p.Spec.Drain.Evict {
		for i := range holders {
			ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: holders[i].Name, Namespace: holders[i].Namespace}}
			if err := r.SubResource("eviction").Create(ctx, &holders[i], ev); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{RequeueAfter: r.Requeue}, fmt.Sprintf("evicting %s/%s: %v", holders[i].Namespace, holders[i].Name, err), nil
			}
		}
	}
	return ctrl.Result{RequeueAfter: r.Requeue}, fmt.Sprintf("draining from %s to %s: waiting for %d GPU pods: %s", from, to, len(names), strings.Join(names, ", ")), nil
}

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

// ensureLabels sets the node's deploy labels, writing only on change.
func (r *NodeReconciler) ensureLabels(ctx context.Context, node *corev1.Node, operands []string) error {
	labels, changed := workload.DeployLabels(node.Labels, operands)
	if !changed {
		return nil
	}
	patch := client.MergeFrom(node.DeepCopy()) // removed labels become null in the patch
	node.Labels = labels
	if err := r.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("node %s: set deploy labels: %w", node.Name, err)
	}
	return nil
}

// operandsNotReady lists operands whose pod on the node is missing or not
// Ready.
func (r *NodeReconciler) operandsNotReady(ctx context.Context, node string, want []string) ([]string, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(r.Namespace), client.MatchingFields{podNodeIndex: node}); err != nil {
		return nil, fmt.Errorf("node %s: list operand pods: %w", node, err)
	}
	ready := map[string]bool{}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready[p.Labels[names.OperandLabel]] = true
			}
		}
	}
	var out []string
	for _, o := range want {
		if !ready[o] {
			out = append(out, o)
		}
	}
	return out, nil
}

// countDevices fills the GPU counts from the node's capacity.
func countDevices(node *corev1.Node, st *v1alpha1.SandboxGPUNode) {
	var gpus, vfio, vgpus int64
	for name, q := range node.Status.Capacity {
		n := string(name)
		if !strings.HasPrefix(n, "nvidia.com/") {
			continue
		}
		switch {
		case n == "nvidia.com/gpu" || strings.HasPrefix(n, "nvidia.com/mig-"):
			gpus += q.Value()
		case strings.HasPrefix(n, "nvidia.com/NVIDIA_"):
			vgpus += q.Value()
		case n == "nvidia.com/nvswitch":
		default:
			gpus += q.Value()
			vfio += q.Value()
		}
	}
	st.Status.GPUs, st.Status.BoundToVFIO, st.Status.VGPUs = int32(gpus), int32(vfio), int32(vgpus)
}

// TrimNode is a cache transform: the operator reads a Node's labels,
// resource capacity and published permittedHostDevices only, so images, conditions, addresses and managed
// fields are dropped before caching (most of a Node's size on big hosts).
func TrimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	if v, ok := n.Annotations[names.PermittedAnnotation]; ok {
		n.Annotations = map[string]string{names.PermittedAnnotation: v}
	} else {
		n.Annotations = nil
	}
	n.Status = corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable}
	return n, nil
}
