package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
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
	// Metrics count reconcile errors (nil: none).
	Metrics *Metrics
}

// SetupWithManager registers the reconciler.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	policy := func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: PolicyName}}}
	}
	toPolicy := handler.EnqueueRequestsFromMapFunc(policy)
	return ctrl.NewControllerManagedBy(mgr).
		Named(policyControllerName).
		For(&v1alpha1.SandboxGPUPolicy{}, builder.WithPredicates(policyChangedBesidesStatus())).
		Owns(&appsv1.DaemonSet{}).
		Owns(&corev1.ConfigMap{}).
		// Node states change by the thousand when nodes join or switch:
		// their changes fold into a few recounts (and status writes).
		Watches(&v1alpha1.SandboxGPUNode{}, newPacer(recountInterval).handler(policy)).
		Watches(&corev1.Node{}, toPolicy, builder.WithPredicates(osLabelsChanged())).
		Watches(&nodev1.RuntimeClass{}, toPolicy).
		Complete(r.Metrics.countErrors(policyControllerName, r))
}

// The operator adds and removes its finalizer (ReleaseFinalizer).
// +kubebuilder:rbac:groups=sandbox-gpu.io,resources=sandboxgpupolicies,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=sandbox-gpu.io,resources=sandboxgpupolicies/status,verbs=get;patch
// The policy owns the operand DaemonSets and node states with
// blockOwnerDeletion, which the OwnerReferencesPermissionEnforcement
// admission plugin allows only to who may update its finalizers.
// +kubebuilder:rbac:groups=sandbox-gpu.io,resources=sandboxgpupolicies/finalizers,verbs=update
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
		if err = client.IgnoreNotFound(err); err != nil {
			return ctrl.Result{}, fmt.Errorf("policy %s: get: %w", req.Name, err)
		}
		return ctrl.Result{}, nil
	}
	// The status is written by a merge patch against this copy (patchStatus),
	// and not at all when nothing changed.
	before := p.DeepCopy()
	// While the policy is being deleted its status says how the release
	// goes; once every node is released the finalizer goes, after the
	// status is written.
	deleting, finalize := !p.DeletionTimestamp.IsZero(), false
	defer func() {
		if !equality.Semantic.DeepEqual(before.Status, p.Status) {
			if err := patchStatus(ctx, r.Client, &p, before); err != nil && reterr == nil {
				reterr = fmt.Errorf("policy %s: write status: %w", p.Name, err)
			}
		}
		if finalize && reterr == nil {
			if err := r.removeFinalizer(ctx, &p); err != nil {
				reterr = fmt.Errorf("policy %s: %w", p.Name, err)
			}
		}
	}()
	if err := r.ensureFinalizer(ctx, &p); err != nil {
		return ctrl.Result{}, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	cmErr := r.ensureVGPUConfig(ctx, &p)
	opts := r.Operands
	var err error
	if opts.OSTag, err = r.osTag(ctx, &p); err != nil {
		return ctrl.Result{}, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	if opts.KataRuntimeHandler, err = r.kataRuntimeHandler(ctx, &p); err != nil {
		return ctrl.Result{}, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	var errs []*operandError
	for _, name := range operands.Names() {
		if err := r.reconcileOperand(ctx, &p, name, opts); err != nil {
			errs = append(errs, err)
		}
	}
	if deleting {
		if finalize, err = r.uninstallStatus(ctx, &p); err != nil {
			return ctrl.Result{}, fmt.Errorf("policy %s: %w", p.Name, err)
		}
		if len(errs) > 0 {
			finalize = false
			return ctrl.Result{}, fmt.Errorf("policy %s: %w", p.Name, errs[0])
		}
		return ctrl.Result{}, nil
	}
	problems, err := r.checkIntegrations(ctx, &p)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	if err := r.summarize(ctx, &p, errs, problems); err != nil {
		return ctrl.Result{}, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	if len(errs) > 0 {
		return ctrl.Result{}, fmt.Errorf("policy %s: %w", p.Name, errs[0])
	}
	if cmErr != nil {
		return ctrl.Result{}, fmt.Errorf("policy %s: vGPU config: %w", p.Name, cmErr)
	}
	return ctrl.Result{}, nil
}

// operandError is an operand DaemonSet the policy reconciler could not
// bring in line: what it tried (read, build, create, update, delete) and why.
type operandError struct {
	operand, action string
	err             error
}

func (e *operandError) Error() string {
	return fmt.Sprintf("operand %s: %s its DaemonSet: %v", e.operand, e.action, e.err)
}

func (e *operandError) Unwrap() error { return e.err }

// operandFailures says in sentences which operand DaemonSets failed and
// why, one sentence per cause: "The DaemonSets of vfio-manager and
// validator could not be created: namespaces "x" not found."
func operandFailures(errs []*operandError) []string {
	past := map[string]string{"read": "read", "build": "built", "create": "created", "update": "updated", "delete": "deleted"}
	var causes []string
	byCause := map[string][]string{}
	for _, e := range errs {
		cause := fmt.Sprintf("could not be %s: %s.", past[e.action], errText(e.err))
		if _, ok := byCause[cause]; !ok {
			causes = append(causes, cause)
		}
		byCause[cause] = append(byCause[cause], e.operand)
	}
	out := make([]string, 0, len(causes))
	for _, cause := range causes {
		ops := byCause[cause]
		what := "The DaemonSet of "
		if len(ops) > 1 {
			what = "The DaemonSets of "
		}
		out = append(out, what+nameList(ops)+" "+cause)
	}
	return out
}

func (r *PolicyReconciler) reconcileOperand(ctx context.Context, p *v1alpha1.SandboxGPUPolicy, name string, opts operands.Options) *operandError {
	fail := func(action string, err error) *operandError {
		return &operandError{operand: name, action: action, err: err}
	}
	existing := &appsv1.DaemonSet{}
	key := types.NamespacedName{Namespace: opts.Namespace, Name: operands.DaemonSetName(name)}
	err := r.Get(ctx, key, existing)
	found := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fail("read", err)
	}
	if !operands.Enabled(name, &p.Spec) {
		if found && metav1.IsControlledBy(existing, p) {
			if err := r.Delete(ctx, existing); client.IgnoreNotFound(err) != nil {
				return fail("delete", err)
			}
		}
		return nil
	}
	want, err := operands.Build(name, &p.Spec, opts)
	if err != nil {
		return fail("build", err)
	}
	hash, err := specHash(want)
	if err != nil {
		return fail("build", err)
	}
	if found && existing.Annotations[names.SpecHashAnnotation] == hash {
		return nil // unchanged: no write
	}
	if want.Annotations == nil {
		want.Annotations = map[string]string{}
	}
	want.Annotations[names.SpecHashAnnotation] = hash
	if err := controllerutil.SetControllerReference(p, want, r.Scheme()); err != nil {
		return fail("build", err)
	}
	if !found {
		if err := r.Create(ctx, want); err != nil {
			return fail("create", err)
		}
		return nil
	}
	existing.Labels, existing.Annotations, existing.OwnerReferences = want.Labels, want.Annotations, want.OwnerReferences
	existing.Spec = want.Spec
	if err := r.Update(ctx, existing); err != nil {
		return fail("update", err)
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

// KataRuntimeClassCondition reports whether Kata mode's RuntimeClass exists.
const KataRuntimeClassCondition = "KataRuntimeClass"

// DefaultKataRuntimeClass is the RuntimeClass of Kata GPU pods.
const DefaultKataRuntimeClass = "kata-qemu-nvidia-gpu"

// kataRuntimeHandler is the handler of the RuntimeClass of Kata GPU pods in
// Kata mode, "" when it does not exist (or in another mode): the NRI
// plugin leaves that handler's pods alone.
func (r *PolicyReconciler) kataRuntimeHandler(ctx context.Context, p *v1alpha1.SandboxGPUPolicy) (string, error) {
	sw := p.Spec.SandboxWorkloads
	if !sw.Enabled || sw.Mode != v1alpha1.ModeKata {
		return "", nil
	}
	name := p.Spec.Kata.RuntimeClassName
	if name == "" {
		name = DefaultKataRuntimeClass
	}
	var rc nodev1.RuntimeClass
	if err := r.Get(ctx, types.NamespacedName{Name: name}, &rc); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("RuntimeClass %s: %w", name, err)
	}
	return rc.Handler, nil
}

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
		Message: "RuntimeClass " + name + " exists.", ObservedGeneration: p.Generation}
	var rc nodev1.RuntimeClass
	err := r.Get(ctx, types.NamespacedName{Name: name}, &rc)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("RuntimeClass %s: %w", name, err)
	}
	var problems []string
	if apierrors.IsNotFound(err) {
		cond.Status, cond.Reason = metav1.ConditionFalse, "Missing"
		cond.Message = fmt.Sprintf("RuntimeClass %s was not found, so Kata GPU pods cannot start: install Kata with its NVIDIA GPU runtime class, or set spec.kata.runtimeClassName.", name)
		problems = append(problems, cond.Message)
	}
	meta.SetStatusCondition(&p.Status.Conditions, cond)
	return problems, nil
}
