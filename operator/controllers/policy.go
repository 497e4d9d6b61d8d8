package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// PolicyReconciler keeps the operand DaemonSets in line with the policy
// and reports node counts and conditions in the policy's status.
type PolicyReconciler struct {
	client.Client
	Operands operands.Options
}

// SetupWithManager registers the reconciler.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	toPolicy := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: PolicyName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("sandbox-gpu-policy").
		For(&v1alpha1.SandboxGPUPolicy{}).
		Owns(&appsv1.DaemonSet{}).
		Watches(&v1alpha1.SandboxGPUNode{}, toPolicy).
		Watches(&nodev1.RuntimeClass{}, toPolicy).
		Complete(r)
}

// +kubebuilder:rbac:groups=sandbox-gpu.io,resources=sandboxgpupolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=sandbox-gpu.io,resources=sandboxgpupolicies/status,verbs=get;update
// +kubebuilder:rbac:groups=apps,namespace=sandbox-gpu,resources=daemonsets,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=sandbox-gpu,resources=leases,verbs=get;list;watch;create;update

// Reconcile implements reconcile.Reconciler.
func (r *PolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	if req.Name != PolicyName {
		return ctrl.Result{}, nil
	}
	var p v1alpha1.SandboxGPUPolicy
	if err := r.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := p.Status.DeepCopy()
	defer func() {
		if equality.Semantic.DeepEqual(before, &p.Status) {
			return
		}
		if err := r.Status().Update(ctx, &p); err != nil && reterr == nil {
			reterr = fmt.Errorf("policy %s: update status: %w", p.Name, err)
		}
	}()
	var errs []error
	for _, name := range operands.Names() {
		if err := r.reconcileOperand(ctx, &p, name); err != nil {
			errs = append(errs, err)
		}
	}
	problems, err := r.checkIntegrations(ctx, &p)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.summarize(ctx, &p, errs, problems); err != nil {
		return ctrl.Result{}, err
	}
	if len(errs) > 0 {
		return ctrl.Result{}, errs[0]
	}
	return ctrl.Result{}, nil
}

func (r *PolicyReconciler) reconcileOperand(ctx context.Context, p *v1alpha1.SandboxGPUPolicy, name string) error {
	existing := &appsv1.DaemonSet{}
	key := types.NamespacedName{Namespace: r.Operands.Namespace, Name: operands.DaemonSetName(name)}
	err := r.Get(ctx, key, existing)
	found := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("operand %s: %w", name, err)
	}
	if !operands.Enabled(name, &p.Spec) {
		if found && metav1.IsControlledBy(existing, p) {
			if err := r.Delete(ctx, existing); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("operand %s: delete: %w", name, err)
			}
		}
		return nil
	}
	want, err := operands.Build(name, &p.Spec, r.Operands)
	if err != nil {
		return fmt.Errorf("operand %s: %w", name, err)
	}
	hash, err := specHash(want)
	if err != nil {
		return err
	}
	if found && existing.Annotations[names.SpecHashAnnotation] == hash {
		return nil // unchanged: no write
	}
	if want.Annotations == nil {
		want.Annotations = map[string]string{}
	}
	want.Annotations[names.SpecHashAnnotation] = hash
	if err := controllerutil.SetControllerReference(p, want, r.Scheme()); err != nil {
		return err
	}
	if !found {
		if err := r.Create(ctx, want); err != nil {
			return fmt.Errorf("operand %s: create: %w", name, err)
		}
		return nil
	}
	existing.Labels, existing.Annotations, existing.OwnerReferences = want.Labels, want.Annotations, want.OwnerReferences
	existing.Spec = want.Spec
	if err := r.Update(ctx, existing); err != nil {
		return fmt.Errorf("operand %s: update: %w", name, err)
	}
	return nil
}

func specHash(ds *appsv1.DaemonSet) (string, error) {
	b, err := json.Marshal(struct {
		Labels map[string]string
		Spec   appsv1.DaemonSetSpec
	}{ds.Labels, ds.Spec})
	if err != nil {
		return "", fmt.Errorf("hash operand %s: %w", ds.Name, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// summarize counts GPU nodes per config and sets Ready and Degraded.
func (r *PolicyReconciler) summarize(ctx context.Context, p *v1alpha1.SandboxGPUPolicy, errs []error, problems []string) error {
	var nodes v1alpha1.SandboxGPUNodeList
	if err := r.List(ctx, &nodes); err != nil {
		return fmt.Errorf("list node states: %w", err)
	}
	var c v1alpha1.NodeCounts
	var failed []string
	for _, n := range nodes.Items {
		switch n.Status.WorkloadConfig {
		case v1alpha1.WorkloadContainer:
			c.Container++
		case v1alpha1.WorkloadVMPassthrough:
			c.VMPassthrough++
		case v1alpha1.WorkloadVMVGPU:
			c.VMVGPU++
		}
		switch n.Status.State {
		case v1alpha1.StateReady:
			c.Ready++
		case v1alpha1.StateFailed:
			c.Failed++
			failed = append(failed, n.Name)
		}
	}
	p.Status.Nodes = c
	p.Status.ObservedGeneration = p.Generation
	total := int32(len(nodes.Items))
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "AllNodesReady",
		Message: fmt.Sprintf("%d of %d GPU nodes ready", c.Ready, total), ObservedGeneration: p.Generation}
	if c.Ready < total || len(errs) > 0 {
		ready.Status, ready.Reason = metav1.ConditionFalse, "NodesNotReady"
	}
	degraded := metav1.Condition{Type: "Degraded", Status: metav1.ConditionFalse, Reason: "AsExpected", Message: "no failed node or operand", ObservedGeneration: p.Generation}
	if len(failed) > 0 || len(errs) > 0 || len(problems) > 0 {
		degraded.Status, degraded.Reason = metav1.ConditionTrue, "Failures"
		degraded.Message = fmt.Sprintf("failed nodes: %v; operand errors: %v; %s", failed, errs, strings.Join(problems, "; "))
	}
	meta.SetStatusCondition(&p.Status.Conditions, ready)
	meta.SetStatusCondition(&p.Status.Conditions, degraded)
	return nil
}

// KataRuntimeClassCondition reports whether Kata mode's RuntimeClass exists.
const KataRuntimeClassCondition = "KataRuntimeClass"

// DefaultKataRuntimeClass is the RuntimeClass of Kata GPU pods.
const DefaultKataRuntimeClass = "kata-qemu-nvidia-gpu"

// checkIntegrations checks what the mode depends on (Kata's RuntimeClass)
// and returns the problems found.
func (r *PolicyReconciler) checkIntegrations(ctx context.Context, p *v1alpha1.SandboxGPUPolicy) ([]string, error) {
	sw := p.Spec.SandboxWorkloads
	if !sw.Enabled || sw.Mode != v1alpha1.ModeKata {
		meta.RemoveStatusCondition(&p.Status.Conditions, KataRuntimeClassCondition)
		return nil, nil
	}
	name := p.Spec.Kata.RuntimeClassName
	if name == "" {
		name = DefaultKataRuntimeClass
	}
	cond := metav1.Condition{Type: KataRuntimeClassCondition, Status: metav1.ConditionTrue, Reason: "Found",
		Message: "RuntimeClass " + name + " exists", ObservedGeneration: p.Generation}
	var rc nodev1.RuntimeClass
	err := r.Get(ctx, types.NamespacedName{Name: name}, &rc)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("RuntimeClass %s: %w", name, err)
	}
	var problems []string
	if apierrors.IsNotFound(err) {
		cond.Status, cond.Reason = metav1.ConditionFalse, "Missing"
		cond.Message = fmt.Sprintf("RuntimeClass %s not found: Kata GPU pods cannot start (install Kata with its NVIDIA GPU runtime class, or set spec.kata.runtimeClassName)", name)
		problems = append(problems, cond.Message)
	}
	meta.SetStatusCondition(&p.Status.Conditions, cond)
	return problems, nil
}
