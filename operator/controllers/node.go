// Package controllers holds the operator's reconcilers.
package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// PolicyName is the one SandboxGPUPolicy the operator follows.
const PolicyName = "default"

// Controller names (also the controller label of the error counter).
const (
	nodeControllerName     = "sandbox-gpu-node"
	policyControllerName   = "sandbox-gpu-policy"
	kubeVirtControllerName = "sandbox-gpu-kubevirt"
)

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
	// Metrics count nodes by config and state and time transitions (nil:
	// none).
	Metrics *Metrics

	// fence holds back reconciles of a state older than the last write.
	fence cacheFence
	// slots bounds the nodes changing config at once.
	slots transitionSlots
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
		Named(nodeControllerName).
		WithOptions(controller.Options{MaxConcurrentReconciles: 16}). // nodes are independent
		For(&corev1.Node{}, builder.WithPredicates(gpuNodes)).
		// A node's state has the node's name (the policy controls it).
		// (and a state that changes may free a transition slot).
		Watches(&v1alpha1.SandboxGPUNode{}, handler.EnqueueRequestsFromMapFunc(r.slotWaiters)).
		Watches(&v1alpha1.SandboxGPUPolicy{}, handler.EnqueueRequestsFromMapFunc(r.allGPUNodes), builder.WithPredicates(policyIntentChanged())).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podNode)).
		Complete(r.Metrics.countErrors(nodeControllerName, r))
}

func (r *NodeReconciler) allGPUNodes(ctx context.Context, _ client.Object) []reconcile.Request {
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil { // read only
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
// +kubebuilder:rbac:groups=sandbox-gpu.io,resources=sandboxgpunodes/status,verbs=get;patch

// Reconcile implements reconcile.Reconciler.
func (r *NodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var node corev1.Node
	if err := r.Get(ctx, req.NamespacedName, &node); err != nil {
		if apierrors.IsNotFound(err) {
			// The node is gone: so is its state (a state's events reach
			// here by name, so also at start for a node that went while
			// the operator was down).
			r.Metrics.forgetNode(req.Name)
			r.fence.forget(req.Name)
			r.slots.forget(req.Name)
			st := &v1alpha1.SandboxGPUNode{ObjectMeta: metav1.ObjectMeta{Name: req.Name}}
			if err := r.Delete(ctx, st); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, fmt.Errorf("node %s: remove the state of a deleted node: %w", req.Name, err)
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("node %s: get: %w", req.Name, err)
	}
	if !workload.IsGPUNode(&node) {
		r.Metrics.forgetNode(node.Name)
		return ctrl.Result{}, nil
	}
	var policy v1alpha1.SandboxGPUPolicy
	if err := r.Get(ctx, types.NamespacedName{Name: PolicyName}, &policy); err != nil {
		if err = client.IgnoreNotFound(err); err != nil {
			return ctrl.Result{}, fmt.Errorf("node %s: get policy %s: %w", node.Name, PolicyName, err)
		}
		return ctrl.Result{}, nil
	}
	st, err := r.nodeState(ctx, &node, &policy)
	if err != nil {
		return ctrl.Result{}, err
	}
	if r.fence.stale(node.Name, st.ResourceVersion) {
		// The cache has not seen the last status write yet: its watch event
		// brings the node back (the requeue is a safety net).
		return ctrl.Result{RequeueAfter: r.Requeue}, nil
	}
	before := st.DeepCopy()
	rep := &nodeReport{node: node.Name}

	desired, invalid := workload.Config(&node, &policy)
	st.Status.WorkloadConfig = desired
	countDevices(&node, st)
	if invalid != "" && !strings.HasPrefix(before.Status.Message, invalid) {
		rep.invalidConfig(invalid)
	}
	res, msg, err := r.step(ctx, &node, &policy, st, desired, rep)
	setNodeConditions(st, msg, rep.failReason, r.Now())
	if invalid != "" {
		msg = strings.TrimSpace(invalid + " " + msg)
	}
	st.Status.Message = msg
	if werr := r.writeState(ctx, &node, st, before, rep); werr != nil && err == nil {
		err = werr
	}
	return res, err
}

// writeState writes the node's status by a merge patch against the copy
// taken before this reconcile changed it (patchStatus; nothing is sent when
// nothing changed). Once the status is stored, the steps it records are
// reported: events and metrics.
func (r *NodeReconciler) writeState(ctx context.Context, node *corev1.Node, st, before *v1alpha1.SandboxGPUNode, rep *nodeReport) error {
	if !equality.Semantic.DeepEqual(before.Status, st.Status) {
		if err := patchStatus(ctx, r.Client, st, before); err != nil {
			return fmt.Errorf("node %s: write state: %w", node.Name, err)
		}
		r.fence.wrote(node.Name, before.ResourceVersion)
	}
	r.send(node, st, rep)
	// The transition is timed before the gauge shows the new state, so
	// that whoever sees a node counted as ready also sees its switch timed.
	if t := rep.completed; t != nil {
		r.Metrics.transitionDone(t.From, t.To, t.Completed.Sub(t.Started.Time))
	}
	r.Metrics.setNode(node.Name, st.Status.WorkloadConfig, st.Status.State)
	return nil
}

// setState moves the node to state, stamping when; it reports whether the
// state changed (the step is new).
func (r *NodeReconciler) setState(st *v1alpha1.SandboxGPUNode, state string) bool {
	if st.Status.State == state {
		return false
	}
	st.Status.State = state
	now := metav1.NewTime(r.Now())
	st.Status.Since = &now
	return true
}

// step runs one phase of the node's state machine and says, in a sentence,
// what it waits for. What it reports (events, a completed transition) goes
// to rep. A change of config goes pending (waiting for a transition slot)
// → draining (node_drain.go) → releasing (node_release.go) → configuring
// → ready (node_configure.go); a policy being deleted releases the node
// instead (node_uninstall.go).
func (r *NodeReconciler) step(ctx context.Context, node *corev1.Node, p *v1alpha1.SandboxGPUPolicy, st *v1alpha1.SandboxGPUNode, desired string, rep *nodeReport) (ctrl.Result, string, error) {
	if !p.DeletionTimestamp.IsZero() {
		return r.uninstall(ctx, node, p, st, rep)
	}
	if why := workload.Unsupported(desired, p); why != "" {
		return r.unsupported(ctx, node, p, st, desired, why, ReasonUnsupportedConfig, rep)
	}
	applied := st.Status.AppliedConfig
	if why := workload.DriverRefusal(node, desired, p); why != "" && applied != desired {
		return r.unsupported(ctx, node, p, st, desired, why, ReasonDriverChangeRefused, rep)
	}
	if applied == desired {
		dropAbandonedTransition(st)
		r.slots.forget(node.Name)
		return r.configure(ctx, node, p, st, desired, rep)
	}
	started := beginTransition(st, applied, desired, r.Now())
	if applied == "" {
		return r.configure(ctx, node, p, st, desired, rep) // a new node: nothing to drain or release
	}
	if started || !inRelease(st) {
		queued, msg, err := r.waitForSlot(ctx, node, p, st, rep)
		if err != nil || queued {
			return ctrl.Result{RequeueAfter: 12 * r.Requeue}, msg, err
		}
		// A failed drain stays failed until its GPU pods are gone; a
		// newer config starts a new drain.
		announce := started
		if started || st.Status.State != v1alpha1.StateFailed {
			announce = r.setState(st, v1alpha1.StateDraining) || announce
		}
		holders, err := r.gpuHolders(ctx, node.Name, applied)
		if err != nil {
			return ctrl.Result{}, "", err
		}
		if announce {
			rep.configChanged(applied, desired, holders, p.Spec.Drain.Evict)
		}
		if len(holders) > 0 {
			return r.drain(ctx, node, p, st, holders, applied, desired, rep)
		}
	}
	if rel := workload.ReleaseOperand(applied, p); rel != "" {
		res, msg, done, err := r.release(ctx, node, p, st, applied, desired, rel, rep)
		if err != nil || !done {
			return res, msg, err
		}
	}
	return r.configure(ctx, node, p, st, desired, rep)
}

// ensureLabels sets the node's deploy labels, writing only on change.
func (r *NodeReconciler) ensureLabels(ctx context.Context, node *corev1.Node, operands []string) error {
	return r.ensureNode(ctx, node, operands, nil, false)
}

// ensureNode sets the node's deploy labels (deploy) and release labels
// (release) in one write, removes the release reports of releases no
// longer running and, with dropVGPUState, the vGPU device manager's
// nvidia.com/vgpu.config.state label (the node left vm-vgpu); it writes
// only on change.
func (r *NodeReconciler) ensureNode(ctx context.Context, node *corev1.Node, deploy, release []string, dropVGPUState bool) error {
	labels, changed := workload.NodeLabels(node.Labels, deploy, release)
	if _, ok := labels[names.VGPUConfigStateLabel]; ok && dropVGPUState {
		delete(labels, names.VGPUConfigStateLabel)
		changed = true
	}
	var annotations map[string]string
	for k := range node.Annotations {
		if op, ok := strings.CutPrefix(k, names.ReleaseReportPrefix); ok && !slices.Contains(release, op) {
			if annotations == nil {
				annotations = maps.Clone(node.Annotations)
			}
			delete(annotations, k)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	patch := client.MergeFrom(node.DeepCopy()) // removed labels become null in the patch
	node.Labels = labels
	if annotations != nil {
		node.Annotations = annotations
	}
	if err := r.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("node %s: set deploy labels: %w", node.Name, err)
	}
	return nil
}

// readyOperands says which operands have a Ready pod on the node.
func (r *NodeReconciler) readyOperands(ctx context.Context, node string) (map[string]bool, error) {
	ready, _, err := r.operandPods(ctx, node)
	return ready, err
}

// operandPods says which operands have a Ready pod on the node, and which
// have any pod there (terminating ones included).
func (r *NodeReconciler) operandPods(ctx context.Context, node string) (ready, present map[string]bool, err error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(r.Namespace), client.MatchingFields{podNodeIndex: node}); err != nil {
		return nil, nil, fmt.Errorf("node %s: list operand pods: %w", node, err)
	}
	ready, present = map[string]bool{}, map[string]bool{}
	for _, p := range pods.Items {
		present[p.Labels[names.OperandLabel]] = true
		if p.DeletionTimestamp != nil {
			continue // on its way out: its operand is stopping
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready[p.Labels[names.OperandLabel]] = true
			}
		}
	}
	return ready, present, nil
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
		case workload.IsVGPUResource(n): // mdev types and SR-IOV VF types alike
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
// resource capacity, published permittedHostDevices, release reports and
// mixed-node split (sandbox-gpu.io/vm-gpus) and its report only, so images, conditions, addresses and managed fields are dropped
// before caching (most of a Node's size on big hosts).
func TrimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	var kept map[string]string
	for k, v := range n.Annotations {
		if k == names.PermittedAnnotation || k == names.VMGPUsAnnotation || k == names.VMGPUsReportAnnotation || strings.HasPrefix(k, names.ReleaseReportPrefix) {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[k] = v
		}
	}
	n.Annotations = kept
	n.Status = corev1.NodeStatus{Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable}
	return n, nil
}
