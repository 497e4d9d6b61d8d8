package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sandbox-gpu/sandbox-gpu/internal/gpuname"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// MDEVGate stops KubeVirt from creating mdevs itself when the vGPU device
// manager owns the vGPUs (added when any of our entries is a vGPU, mdev or
// SR-IOV VF; never removed: other vGPU users may rely on it).
const MDEVGate = "DisableMDEVConfiguration"

var kubeVirtList = schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "KubeVirtList"}

// KubeVirtReconciler keeps every KubeVirt CR's permittedHostDevices in
// step with the GPU resources nodes advertise, without touching entries it
// did not add.
type KubeVirtReconciler struct {
	client.Client
	// Resync is how often the CRs are checked without a node event (5m).
	Resync time.Duration
	// Metrics count reconcile errors (nil: none).
	Metrics *Metrics
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=kubevirts,verbs=get;list;update

// SetupWithManager registers the reconciler; it runs for one key.
func (r *KubeVirtReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Resync == 0 {
		r.Resync = 5 * time.Minute
	}
	one := func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: "kubevirt"}}}
	}
	// Only node changes that change the entries count, and they fold into
	// a few recounts of all nodes.
	return ctrl.NewControllerManagedBy(mgr).
		Named(kubeVirtControllerName).
		Watches(&corev1.Node{}, newPacer(recountInterval).handler(one), builder.WithPredicates(permittedChanged())).
		Watches(&v1alpha1.SandboxGPUPolicy{}, handler.EnqueueRequestsFromMapFunc(one), builder.WithPredicates(policyIntentChanged())).
		Complete(r.Metrics.countErrors(kubeVirtControllerName, r))
}

// permittedChanged passes the node events that change the node's own
// entries (Permitted of the node alone): the operator's deploy labels and
// most other node updates leave them as they were, and so the merged
// entries of all nodes.
func permittedChanged() predicate.Funcs {
	entries := func(o client.Object) ([]kubevirtv1.PciHostDevice, []kubevirtv1.MediatedHostDevice) {
		n, ok := o.(*corev1.Node)
		if !ok {
			return nil, nil
		}
		pci, mdev, _ := Permitted([]corev1.Node{*n})
		return pci, mdev
	}
	some := func(o client.Object) bool {
		pci, mdev := entries(o)
		return len(pci)+len(mdev) > 0
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return some(e.Object) },
		DeleteFunc: func(e event.DeleteEvent) bool { return some(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Node)
			n, ok2 := e.ObjectNew.(*corev1.Node)
			if ok1 && ok2 && maps.Equal(o.Labels, n.Labels) && o.Annotations[names.PermittedAnnotation] == n.Annotations[names.PermittedAnnotation] &&
				equality.Semantic.DeepEqual(o.Status.Capacity, n.Status.Capacity) {
				return false // none of what Permitted reads changed (most updates: heartbeats, status)
			}
			oldP, oldM := entries(e.ObjectOld)
			newP, newM := entries(e.ObjectNew)
			return !equality.Semantic.DeepEqual(oldP, newP) || !equality.Semantic.DeepEqual(oldM, newM)
		},
	}
}

// Reconcile implements reconcile.Reconciler.
func (r *KubeVirtReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	var p v1alpha1.SandboxGPUPolicy
	if err := r.Get(ctx, types.NamespacedName{Name: PolicyName}, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	sw := p.Spec.SandboxWorkloads
	manage := p.Spec.KubeVirt.ManagePermittedHostDevices
	if !sw.Enabled || (sw.Mode != "" && sw.Mode != v1alpha1.ModeKubeVirt) || (manage != nil && !*manage) {
		return ctrl.Result{}, nil
	}
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil { // read only
		return ctrl.Result{}, fmt.Errorf("list nodes: %w", err)
	}
	pci, mdev, problems := Permitted(nodes.Items)
	if len(problems) > 0 {
		log.FromContext(ctx).Info("Ignored published permittedHostDevices", "problems", problems)
	}
	crs := &unstructured.UnstructuredList{}
	crs.SetGroupVersionKind(kubeVirtList)
	if err := r.List(ctx, crs); err != nil {
		if meta.IsNoMatchError(err) {
			return ctrl.Result{RequeueAfter: r.Resync}, nil // KubeVirt is not installed (yet)
		}
		return ctrl.Result{}, fmt.Errorf("list KubeVirt CRs: %w", err)
	}
	for i := range crs.Items {
		if err := r.sync(ctx, &crs.Items[i], pci, mdev); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: r.Resync}, nil
}

// Permitted derives the entries from the GPU resources nodes advertise.
// What a node's validator published (names.PermittedAnnotation) comes
// first, on nodes that run our KubeVirt plugin (a stale annotation of a
// node switched to another config counts for nothing): mediatedDevices for
// mdev vGPU types (mdevNameSelector "NVIDIA A10-4Q"), pciHostDevices for
// passthrough GPUs and for SR-IOV vendor-specific VFIO vGPUs (the VF's
// 10DE:<device>). Without it, curated passthrough model names map back to
// their PCI ids. vGPU type resources (nvidia.com/NVIDIA_*) have no
// fallback: the name does not say whether the type is an mdev or a VF
// (nvidia.com/NVIDIA_A10-4Q and nvidia.com/NVIDIA_L40S-24Q look alike), and
// a VF's device id is not in it, so a guess would be wrong for one kind
// (an mdev selector for a VF: virt-handler finds no mdev, the VM cannot
// start); they wait for the node's published entry.
// Only resources a node advertises count, only nvidia.com/ names, and only
// NVIDIA (10DE) PCI selectors: a node cannot permit other devices
// cluster-wide. Problems name the node; they are for logging.
func Permitted(nodes []corev1.Node) ([]kubevirtv1.PciHostDevice, []kubevirtv1.MediatedHostDevice, []string) {
	pci := map[string]kubevirtv1.PciHostDevice{}
	mdev := map[string]kubevirtv1.MediatedHostDevice{}
	var problems []string
	for i := range nodes {
		n := &nodes[i]
		if !workload.IsGPUNode(n) {
			continue
		}
		var pubP map[string][]kubevirtv1.PciHostDevice
		var pubM map[string][]kubevirtv1.MediatedHostDevice
		if n.Labels[names.DeployLabel(names.KubeVirtDevicePlugin)] == "true" {
			var err error
			if pubP, pubM, err = published(n); err != nil {
				problems = append(problems, err.Error())
			}
		}
		for res, q := range n.Status.Capacity {
			name, ok := strings.CutPrefix(string(res), "nvidia.com/")
			if !ok || q.IsZero() {
				continue
			}
			if es, ok := pubP[string(res)]; ok {
				for _, e := range es {
					pci[e.ResourceName+"|"+e.PCIVendorSelector] = e
				}
			} else if es, ok := pubM[string(res)]; ok {
				for _, e := range es {
					mdev[e.ResourceName+"|"+e.MDEVNameSelector] = e
				}
			} else if id, ok := gpuname.CuratedDevice(name); ok && !workload.IsVGPUResource(string(res)) {
				e := kubevirtv1.PciHostDevice{PCIVendorSelector: fmt.Sprintf("10DE:%04X", id), ResourceName: string(res), ExternalResourceProvider: true}
				pci[e.ResourceName+"|"+e.PCIVendorSelector] = e
			}
		}
	}
	var outP []kubevirtv1.PciHostDevice
	for _, k := range slices.Sorted(maps.Keys(pci)) {
		outP = append(outP, pci[k])
	}
	var outM []kubevirtv1.MediatedHostDevice
	for _, k := range slices.Sorted(maps.Keys(mdev)) {
		outM = append(outM, mdev[k])
	}
	return outP, outM, problems
}

var pciSelector = regexp.MustCompile(`^10DE:[0-9A-F]{4}$`)

// Bounds on what one node may publish (a node's annotation must not grow
// the cluster-wide KubeVirt CR without limit).
const (
	maxPublishedEntries     = 64
	maxSelectorsPerResource = 8
)

// published reads a node's annotation, keeping the well-formed entries by
// resource name.
func published(n *corev1.Node) (map[string][]kubevirtv1.PciHostDevice, map[string][]kubevirtv1.MediatedHostDevice, error) {
	raw, ok := n.Annotations[names.PermittedAnnotation]
	if !ok {
		return nil, nil, nil
	}
	p, err := wire.ParsePermitted[kubevirtv1.PermittedHostDevices](raw)
	if err != nil {
		return nil, nil, fmt.Errorf("node %s: annotation %s: %w", n.Name, names.PermittedAnnotation, err)
	}
	pci := map[string][]kubevirtv1.PciHostDevice{}
	mdev := map[string][]kubevirtv1.MediatedHostDevice{}
	var bad []string
	if len(p.PciHostDevices)+len(p.MediatedDevices) > maxPublishedEntries {
		return nil, nil, fmt.Errorf("node %s: annotation %s: %d entries, more than %d: ignored", n.Name, names.PermittedAnnotation,
			len(p.PciHostDevices)+len(p.MediatedDevices), maxPublishedEntries)
	}
	for _, e := range p.PciHostDevices {
		e.PCIVendorSelector = strings.ToUpper(e.PCIVendorSelector)
		if !strings.HasPrefix(e.ResourceName, "nvidia.com/") || !pciSelector.MatchString(e.PCIVendorSelector) || len(pci[e.ResourceName]) >= maxSelectorsPerResource {
			bad = append(bad, e.ResourceName+"="+e.PCIVendorSelector)
			continue
		}
		pci[e.ResourceName] = append(pci[e.ResourceName], kubevirtv1.PciHostDevice{PCIVendorSelector: e.PCIVendorSelector, ResourceName: e.ResourceName, ExternalResourceProvider: true})
	}
	for _, e := range p.MediatedDevices {
		if !strings.HasPrefix(e.ResourceName, "nvidia.com/") || !strings.HasPrefix(e.MDEVNameSelector, "NVIDIA ") || len(mdev[e.ResourceName]) >= maxSelectorsPerResource {
			bad = append(bad, e.ResourceName+"="+e.MDEVNameSelector)
			continue
		}
		mdev[e.ResourceName] = append(mdev[e.ResourceName], kubevirtv1.MediatedHostDevice{MDEVNameSelector: e.MDEVNameSelector, ResourceName: e.ResourceName, ExternalResourceProvider: true})
	}
	if len(bad) > 0 {
		return pci, mdev, fmt.Errorf("node %s: annotation %s: ignored entries outside nvidia.com/, NVIDIA PCI ids or NVIDIA mdev types, or over %d selectors per resource: %s",
			n.Name, names.PermittedAnnotation, maxSelectorsPerResource, strings.Join(bad, ", "))
	}
	return pci, mdev, nil
}

// sync merges our entries into one CR, writing only on change. Entries
// are ours by resource name and selector (the names.ManagedPermittedAnnotation lists
// them): anything else is kept as it is, and a resource name someone else
// already permits is left to them (two providers of one resource would
// clash), reported instead.
func (r *KubeVirtReconciler) sync(ctx context.Context, cr *unstructured.Unstructured, pci []kubevirtv1.PciHostDevice, mdev []kubevirtv1.MediatedHostDevice) error {
	before := cr.DeepCopy()
	managed := map[string]bool{}
	var list []string
	_ = json.Unmarshal([]byte(cr.GetAnnotations()[names.ManagedPermittedAnnotation]), &list)
	for _, n := range list {
		managed[n] = true // "pci|<name>|<selector>", "mdev|<name>|<selector>"; a bare name from older versions covers the name
	}
	ours := func(kind, name, sel string) bool { return managed[entryKey(kind, name, sel)] || managed[name] }
	var current kubevirtv1.PermittedHostDevices
	if raw, ok, _ := unstructured.NestedMap(cr.Object, "spec", "configuration", "permittedHostDevices"); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &current); err != nil {
			return fmt.Errorf("KubeVirt %s/%s: permittedHostDevices: %w", cr.GetNamespace(), cr.GetName(), err)
		}
	}
	var next kubevirtv1.PermittedHostDevices
	foreign := map[string]bool{}
	for _, e := range current.PciHostDevices {
		if !ours("pci", e.ResourceName, e.PCIVendorSelector) {
			next.PciHostDevices = append(next.PciHostDevices, e)
			foreign[e.ResourceName] = true
		}
	}
	for _, e := range current.MediatedDevices {
		if !ours("mdev", e.ResourceName, e.MDEVNameSelector) {
			next.MediatedDevices = append(next.MediatedDevices, e)
			foreign[e.ResourceName] = true
		}
	}
	var added, left []string
	// take reports whether our entry goes in: its resource name is not
	// someone else's (then it is left to them).
	take := func(kind, name, sel string) bool {
		if foreign[name] {
			left = append(left, name)
			return false
		}
		added = append(added, entryKey(kind, name, sel))
		return true
	}
	// Our vGPUs of either kind: the vGPU device manager owns the node's
	// vGPUs, so KubeVirt must not create or remove mdevs itself.
	addedVGPU := false
	for _, e := range pci {
		if take("pci", e.ResourceName, e.PCIVendorSelector) {
			next.PciHostDevices = append(next.PciHostDevices, e)
			addedVGPU = addedVGPU || workload.IsVGPUResource(e.ResourceName)
		}
	}
	for _, e := range mdev {
		if take("mdev", e.ResourceName, e.MDEVNameSelector) {
			next.MediatedDevices = append(next.MediatedDevices, e)
			addedVGPU = true
		}
	}
	if len(left) > 0 {
		log.FromContext(ctx).Info("Left resources that the KubeVirt CR already permits to someone else", "kubevirt", cr.GetNamespace()+"/"+cr.GetName(), "resources", left)
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&next)
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedMap(cr.Object, raw, "spec", "configuration", "permittedHostDevices"); err != nil {
		return err
	}
	if addedVGPU {
		gates, _, _ := unstructured.NestedStringSlice(cr.Object, "spec", "configuration", "developerConfiguration", "featureGates")
		if !contains(gates, MDEVGate) {
			if err := unstructured.SetNestedStringSlice(cr.Object, append(gates, MDEVGate), "spec", "configuration", "developerConfiguration", "featureGates"); err != nil {
				return err
			}
		}
	}
	sort.Strings(added)
	b, _ := json.Marshal(added)
	ann := cr.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[names.ManagedPermittedAnnotation] = string(b)
	cr.SetAnnotations(ann)
	if equality.Semantic.DeepEqual(before.Object, cr.Object) {
		return nil
	}
	if err := r.Update(ctx, cr); err != nil {
		return fmt.Errorf("KubeVirt %s/%s: update permittedHostDevices: %w", cr.GetNamespace(), cr.GetName(), err)
	}
	return nil
}

func entryKey(kind, name, selector string) string { return kind + "|" + name + "|" + selector }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
