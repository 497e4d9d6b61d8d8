package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// +kubebuilder:rbac:groups="",namespace=sandbox-gpu,resources=configmaps,verbs=get;list;watch;create;update;delete

// ensureVGPUConfig keeps the ConfigMap with the built-in vGPU config
// (operands.DefaultVGPUConfigMap) while the vGPU device manager is
// deployed and the policy names no ConfigMap of its own, so that its
// --config always points at a mounted file. The policy controls it; it is
// written only when its content differs, and removed when not needed.
func (r *PolicyReconciler) ensureVGPUConfig(ctx context.Context, p *v1alpha1.SandboxGPUPolicy) error {
	key := types.NamespacedName{Namespace: r.Operands.Namespace, Name: operands.DefaultVGPUConfigMap}
	cm := &corev1.ConfigMap{}
	err := r.Get(ctx, key, cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("ConfigMap %s: read: %w", key, err)
	}
	found := err == nil
	if !operands.Enabled(names.VGPUDeviceManager, &p.Spec) || p.Spec.VGPUDeviceManager.Config.Name != "" {
		if found && metav1.IsControlledBy(cm, p) {
			if err := r.Delete(ctx, cm); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("ConfigMap %s: delete: %w", key, err)
			}
		}
		return nil
	}
	want := map[string]string{operands.VGPUConfigKey: string(vgpuconfig.DefaultYAML())}
	labels := map[string]string{names.PartOfLabel: names.PartOf, names.OperandLabel: names.VGPUDeviceManager}
	if found && maps.Equal(cm.Data, want) && maps.Equal(cm.Labels, labels) && metav1.IsControlledBy(cm, p) {
		return nil // unchanged: no write
	}
	if !found {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	}
	cm.Labels, cm.Data, cm.BinaryData = labels, want, nil
	cm.OwnerReferences = nil
	if err := controllerutil.SetControllerReference(p, cm, r.Scheme()); err != nil {
		return fmt.Errorf("ConfigMap %s: own: %w", key, err)
	}
	if !found {
		if err := r.Create(ctx, cm); err != nil {
			return fmt.Errorf("ConfigMap %s: create: %w", key, err)
		}
		return nil
	}
	if err := r.Update(ctx, cm); err != nil {
		return fmt.Errorf("ConfigMap %s: update: %w", key, err)
	}
	return nil
}

// Node Feature Discovery's labels of a node's OS, from which the GPU
// Operator makes the OS suffix of its driver and vGPU manager images.
const (
	nfdOSIDLabel      = "feature.node.kubernetes.io/system-os_release.ID"
	nfdOSVersionLabel = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
)

// osTag returns the OS suffix of the vGPU host driver's image
// (ubuntu22.04): the OS the vm-vgpu nodes' NFD labels name, as the GPU
// Operator resolves it; "" when the vGPU host driver is not deployed or no
// vm-vgpu node is labelled. One DaemonSet serves every node: where the
// vm-vgpu nodes run different OSes the most common wins (then the first by
// name), and the others are logged (name whole tags in
// spec.vgpuManager.version, or keep vm-vgpu nodes on one OS).
func (r *PolicyReconciler) osTag(ctx context.Context, p *v1alpha1.SandboxGPUPolicy) (string, error) {
	if !operands.Enabled(names.VGPUManager, &p.Spec) {
		return "", nil
	}
	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil { // read only
		return "", fmt.Errorf("list nodes for the vGPU host driver's OS: %w", err)
	}
	byTag := map[string][]string{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		id, version := n.Labels[nfdOSIDLabel], n.Labels[nfdOSVersionLabel]
		if !workload.IsGPUNode(n) || id == "" || version == "" {
			continue
		}
		if c, _ := workload.Config(n, p); c == v1alpha1.WorkloadVMVGPU {
			byTag[id+version] = append(byTag[id+version], n.Name)
		}
	}
	tags := slices.Sorted(maps.Keys(byTag))
	sort.SliceStable(tags, func(i, j int) bool { return len(byTag[tags[i]]) > len(byTag[tags[j]]) })
	if len(tags) > 1 {
		log.FromContext(ctx).Info("vm-vgpu nodes run different operating systems; the vGPU host driver's image is made for the most common",
			"osTag", tags[0], "nodesByOS", byTag)
	}
	if len(tags) == 0 {
		return "", nil
	}
	return tags[0], nil
}

// osLabelsChanged passes Node updates that change the NFD OS labels (the
// vGPU host driver's image may follow); new vm-vgpu nodes reach the policy
// through their SandboxGPUNode.
func osLabelsChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()
			return o[nfdOSIDLabel] != n[nfdOSIDLabel] || o[nfdOSVersionLabel] != n[nfdOSVersionLabel]
		},
	}
}
