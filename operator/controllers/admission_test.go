package controllers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// daemonClient is a client acting as an operand's service account with a
// token bound to a pod on node (the node-name claim the admission policy
// reads).
func daemonClient(t *testing.T, operand, node string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(testCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + operandNS + ":" + operands.ServiceAccountName(operand),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + operandNS, "system:authenticated"},
		Extra:  map[string][]string{"authentication.kubernetes.io/node-name": {node}}}
	c, err := client.New(cfg, client.Options{Scheme: testScheme})
	require.NoError(t, err)
	return c
}

// mergePatchNode sends body to Node name as a JSON merge patch, as c.
func mergePatchNode(t *testing.T, c client.Client, name string, body map[string]any) error {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	return c.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, raw))
}

// patchNode reads Node name as c, changes it with mutate and sends the
// change back as a merge patch.
func patchNode(c client.Client, name string, mutate func(*corev1.Node)) error {
	ctx := context.Background()
	n := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return err
	}
	patch := client.MergeFrom(n.DeepCopy())
	mutate(n)
	return c.Patch(ctx, n, patch)
}

// waitOwnNodeOnly waits until the API server has loaded the admission
// policy: write, a node daemon's change of another node's Node, is denied.
func waitOwnNodeOnly(t *testing.T, what string, write func() error) {
	t.Helper()
	testutil.Eventually(t, wait, what, func() bool {
		err := write()
		return err != nil && strings.Contains(err.Error(), "only their own Node")
	})
}

// guardedNode creates a Node with an owner, a finalizer and a taint, which
// the test removes again (the finalizer first) when it ends.
func guardedNode(t *testing.T, c client.Client, name string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:          map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"},
		Finalizers:      []string{"example.com/keep"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "11111111-1111-1111-1111-111111111111"}}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}}}
	require.NoError(t, c.Create(ctx, n))
	t.Cleanup(func() {
		_ = c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		_ = c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
}

// The admission policy keeps a node daemon off its own Node's owners,
// finalizers and taints (a dangling owner reference lets garbage collection
// delete the Node; a finalizer could hold it; a taint would move
// workloads), off its spec, and from deleting it, even where RBAC would let
// it (a delete verb is granted for the test); each write is denied with its
// message, while the writes the daemons make still pass on a Node that has
// all three.
func TestAdmissionGuardsOwnNodeMetadata(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	ctx := context.Background()
	applyOperatorManifests(t, c)
	guardedNode(t, c, "adm-a")
	guardedNode(t, c, "adm-b")
	// Wider RBAC than shipped, so that the admission policy alone decides.
	wide := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "admission-test-wide"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch", "update", "delete"}}}}
	bind := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "admission-test-wide"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: wide.Name}}
	for _, op := range []string{names.Validator, names.VGPUDeviceManager, names.VFIOManager, names.GPUDiscovery,
		names.ReleaseOperand(names.VFIOManager), names.ReleaseOperand(names.VGPUDeviceManager), names.KubeVirtDevicePlugin} {
		bind.Subjects = append(bind.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: operands.ServiceAccountName(op), Namespace: operandNS})
	}
	require.NoError(t, c.Create(ctx, wide))
	require.NoError(t, c.Create(ctx, bind))
	t.Cleanup(func() { _ = c.Delete(ctx, bind); _ = c.Delete(ctx, wide) })

	validator := daemonClient(t, names.Validator, "adm-a")
	meta := func(m map[string]any) map[string]any { return map[string]any{"metadata": m} }
	waitOwnNodeOnly(t, "the admission policy and the test's RBAC are in force", func() error {
		return mergePatchNode(t, validator, "adm-b", meta(map[string]any{"annotations": map[string]any{names.PermittedAnnotation: "{}"}}))
	})

	const (
		owners     = "sandbox-gpu node daemons may not change a Node's metadata.ownerReferences"
		finalizers = "sandbox-gpu node daemons may not change a Node's metadata.finalizers"
		taints     = "sandbox-gpu node daemons may not change a Node's spec.taints"
		spec       = "sandbox-gpu node daemons may not change a Node's spec"
		deletion   = "sandbox-gpu node daemons may not delete a Node"
		ownNode    = "may change only their own Node"
		vmGPUs     = "sandbox-gpu node daemons may not change a Node's sandbox-gpu.io/vm-gpus"
		vmReport   = "only the sandbox-gpu VFIO manager may change a Node's sandbox-gpu.io/vm-gpus-report"
		labels     = "sandbox-gpu node daemons may change only their own labels: "
		notes      = "sandbox-gpu node daemons may change only their own annotations: "
		gpuPresent = "the sandbox-gpu GPU discovery agent may not remove sandbox-gpu.io/gpu.present while the Node carries sandbox-gpu.io/deploy.*"
		tooLong    = "sandbox-gpu node daemons may write annotations of at most 32768 characters; " + names.PermittedAnnotation + " is longer"
	)
	vfioRelease, vgpuRelease := names.ReleaseOperand(names.VFIOManager), names.ReleaseOperand(names.VGPUDeviceManager)
	annotate := func(k string, v any) map[string]any { return meta(map[string]any{"annotations": map[string]any{k: v}}) }
	label := func(k string, v any) map[string]any { return meta(map[string]any{"labels": map[string]any{k: v}}) }
	// The admin's split and an earlier report, as on a mixed node.
	require.NoError(t, c.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "adm-a"}}, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+names.VMGPUsAnnotation+`":"4","`+names.VMGPUsReportAnnotation+`":"{}"},`+
			`"labels":{"`+names.GPUPresentLabel+`":"true","`+names.DeployLabel(names.VFIOManager)+`":"true"}}}`))))
	// The API server adds its own taints to a new Node (not-ready): the
	// same taints are what the Node has now.
	before := getNode(t, c, "adm-a")
	var sameTaints []any
	for _, tn := range before.Spec.Taints {
		sameTaints = append(sameTaints, map[string]any{"key": tn.Key, "value": tn.Value, "effect": string(tn.Effect)})
	}
	require.NotEmpty(t, sameTaints)
	dangling := []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "gone", "uid": "22222222-2222-2222-2222-222222222222"}}
	for _, tc := range []struct {
		what    string
		operand string
		node    string
		body    map[string]any
		deny    string // "" allowed
	}{
		{"a dangling owner added", names.Validator, "adm-a", meta(map[string]any{"ownerReferences": append(dangling, map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "11111111-1111-1111-1111-111111111111"})}), owners},
		{"the owners replaced", names.Validator, "adm-a", meta(map[string]any{"ownerReferences": dangling}), owners},
		{"the owners removed", names.Validator, "adm-a", meta(map[string]any{"ownerReferences": nil}), owners},
		{"a finalizer added", names.Validator, "adm-a", meta(map[string]any{"finalizers": []any{"example.com/keep", "example.com/hold"}}), finalizers},
		{"the finalizers removed", names.Validator, "adm-a", meta(map[string]any{"finalizers": nil}), finalizers},
		{"a taint added", names.Validator, "adm-a", map[string]any{"spec": map[string]any{"taints": []any{
			map[string]any{"key": "nvidia.com/gpu", "effect": "NoSchedule"}, map[string]any{"key": "example.com/evict", "effect": "NoExecute"}}}}, taints},
		{"the taints removed", names.Validator, "adm-a", map[string]any{"spec": map[string]any{"taints": nil}}, taints},
		{"a taint's effect changed", names.Validator, "adm-a", map[string]any{"spec": map[string]any{"taints": []any{
			map[string]any{"key": "nvidia.com/gpu", "effect": "NoExecute"}}}}, taints},
		{"unschedulable", names.Validator, "adm-a", map[string]any{"spec": map[string]any{"unschedulable": true}}, spec},
		{"the vGPU device manager's taint", names.VGPUDeviceManager, "adm-a", map[string]any{"spec": map[string]any{"taints": nil}}, taints},
		{"the discovery agent's finalizer", names.GPUDiscovery, "adm-a", meta(map[string]any{"finalizers": nil}), finalizers},
		{"the VFIO manager's owner", names.VFIOManager, "adm-a", meta(map[string]any{"ownerReferences": dangling}), owners},
		// A mixed node's split: the admin's declaration is no daemon's, its
		// report the VFIO manager's alone.
		{"the VFIO manager changes the split", names.VFIOManager, "adm-a", meta(map[string]any{"annotations": map[string]any{names.VMGPUsAnnotation: "all"}}), vmGPUs},
		{"the validator removes the split", names.Validator, "adm-a", meta(map[string]any{"annotations": map[string]any{names.VMGPUsAnnotation: nil}}), vmGPUs},
		{"the split set on a Node without one", names.VFIOManager, "adm-b-own", meta(map[string]any{"annotations": map[string]any{names.VMGPUsAnnotation: "2"}}), vmGPUs},
		{"the validator writes the split's report", names.Validator, "adm-a", meta(map[string]any{"annotations": map[string]any{names.VMGPUsReportAnnotation: `{"declared":"8"}`}}), vmReport},
		{"the discovery agent removes the report", names.GPUDiscovery, "adm-a", meta(map[string]any{"annotations": map[string]any{names.VMGPUsReportAnnotation: nil}}), vmReport},
		{"the VFIO manager reports the split", names.VFIOManager, "adm-a", meta(map[string]any{"annotations": map[string]any{names.VMGPUsReportAnnotation: `{"declared":"4","ready":true}`}}), ""},
		{"another Node's owners", names.Validator, "adm-b", meta(map[string]any{"ownerReferences": nil}), ownNode},
		// What the daemons do still passes on such a Node.
		// Each daemon its own keys: another daemon's are refused, naming them.
		{"a sandbox-gpu.io label", names.Validator, "adm-a", label("sandbox-gpu.io/probe", "y"), labels + "sandbox-gpu-validator may change none, not sandbox-gpu.io/probe"},
		{"the validator removes gpu.present", names.Validator, "adm-a", label(names.GPUPresentLabel, nil), labels + "sandbox-gpu-validator may change none, not " + names.GPUPresentLabel},
		{"the VFIO manager removes gpu.present", names.VFIOManager, "adm-a", label(names.GPUPresentLabel, nil), labels + "sandbox-gpu-vfio-manager may change none"},
		{"the validator sets the vGPU state", names.Validator, "adm-a", label(names.VGPUConfigStateLabel, "success"), labels + "sandbox-gpu-validator may change none"},
		{"the validator writes a release report", names.Validator, "adm-a", annotate(names.ReleaseReportAnnotation(names.VFIOManager), `{"done":true}`),
			notes + "sandbox-gpu-validator may change only " + names.PermittedAnnotation + ", not " + names.ReleaseReportAnnotation(names.VFIOManager)},
		{"the VFIO manager's release writes the vGPU release's report", vfioRelease, "adm-a", annotate(names.ReleaseReportAnnotation(names.VGPUDeviceManager), `{"done":true}`),
			notes + "sandbox-gpu-vfio-manager-release may change only " + names.ReleaseReportAnnotation(names.VFIOManager)},
		{"the vGPU release writes the VFIO release's report", vgpuRelease, "adm-a", annotate(names.ReleaseReportAnnotation(names.VFIOManager), `{}`), notes},
		{"the VFIO manager writes the permitted devices", names.VFIOManager, "adm-a", annotate(names.PermittedAnnotation, "{}"), notes},
		{"the discovery agent writes the permitted devices", names.GPUDiscovery, "adm-a", annotate(names.PermittedAnnotation, "{}"), notes + "sandbox-gpu-discovery may change none"},
		{"the vGPU device manager writes the VFIO manager's report", names.VGPUDeviceManager, "adm-a", annotate(names.VMGPUsReportAnnotation, "{}"), vmReport},
		{"a plugin's account writes anything", names.KubeVirtDevicePlugin, "adm-a", annotate(names.PermittedAnnotation, "{}"), notes + "sandbox-gpu-kubevirt-device-plugin may change none"},
		{"a deploy label", names.VGPUDeviceManager, "adm-a", label(names.DeployLabel(names.VFIOManager), nil), labels},
		{"a foreign annotation", names.Validator, "adm-a", annotate("example.com/x", "y"), notes},
		{"the discovery agent removes gpu.present under deploy labels", names.GPUDiscovery, "adm-a", label(names.GPUPresentLabel, nil), gpuPresent},
		{"an annotation over 32 KiB", names.Validator, "adm-a", annotate(names.PermittedAnnotation, strings.Repeat("x", 32769)), tooLong},
		// What each daemon writes passes.
		{"the permitted devices at 32 KiB", names.Validator, "adm-a", annotate(names.PermittedAnnotation, strings.Repeat("x", 32768)), ""},
		{"the VFIO manager's release report", vfioRelease, "adm-a", annotate(names.ReleaseReportAnnotation(names.VFIOManager), `{"done":true}`), ""},
		{"the vGPU release's report", vgpuRelease, "adm-a", annotate(names.ReleaseReportAnnotation(names.VGPUDeviceManager), `{"done":true}`), ""},
		{"the discovery agent counts again under deploy labels", names.GPUDiscovery, "adm-a", label(names.GPUCountLabel, "3"), ""},
		{"the permitted-devices annotation", names.Validator, "adm-a", meta(map[string]any{"annotations": map[string]any{names.PermittedAnnotation: "{}"}}), ""},
		{"the vGPU state", names.VGPUDeviceManager, "adm-a", meta(map[string]any{"labels": map[string]any{names.VGPUConfigStateLabel: "success"}}), ""},
		{"the discovery labels", names.GPUDiscovery, "adm-a", meta(map[string]any{"labels": map[string]any{names.GPUPresentLabel: "true"}}), ""},
		{"the same owners, finalizers and taints", names.Validator, "adm-a", map[string]any{
			"metadata": map[string]any{"finalizers": []any{"example.com/keep"}, "annotations": map[string]any{names.PermittedAnnotation: "z"}},
			"spec":     map[string]any{"taints": sameTaints}}, ""},
	} {
		own := "adm-a"
		if tc.node == "adm-b-own" { // a daemon on adm-b, its own Node
			tc.node, own = "adm-b", "adm-b"
		}
		err := mergePatchNode(t, daemonClient(t, tc.operand, own), tc.node, tc.body)
		if tc.deny == "" {
			assert.NoError(t, err, tc.what)
			continue
		}
		if assert.Error(t, err, tc.what) {
			assert.Contains(t, err.Error(), tc.deny, tc.what)
			assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy", "%s: denied by the policy, not RBAC", tc.what)
		}
	}
	err := validator.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "adm-a"}})
	if assert.Error(t, err, "deleting its own Node") {
		assert.Contains(t, err.Error(), deletion)
	}
	n := getNode(t, c, "adm-a")
	assert.Nil(t, n.DeletionTimestamp, "not deleted")
	assert.Equal(t, []string{"example.com/keep"}, n.Finalizers)
	assert.Len(t, n.OwnerReferences, 1)
	assert.Equal(t, "owner", n.OwnerReferences[0].Name)
	assert.Equal(t, before.Spec.Taints, n.Spec.Taints)
	assert.Contains(t, n.Spec.Taints, corev1.Taint{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule})
	assert.False(t, n.Spec.Unschedulable)
	assert.Equal(t, "z", n.Annotations[names.PermittedAnnotation], "the allowed writes landed")
	assert.Equal(t, "true", n.Labels[names.GPUPresentLabel], "gpu.present stays while the Node runs operands")
	assert.Equal(t, `{"done":true}`, n.Annotations[names.ReleaseReportAnnotation(names.VFIOManager)], "the release's report landed")
	assert.Equal(t, "4", n.Annotations[names.VMGPUsAnnotation], "the admin's split stays")
	assert.Equal(t, `{"declared":"4","ready":true}`, n.Annotations[names.VMGPUsReportAnnotation], "the VFIO manager's report landed")
}
