package controllers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// readManifests decodes every document of the given files under manifests/.
func readManifests(t *testing.T, files ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("..", "..", "manifests", f))
		require.NoError(t, err)
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err, f)
			}
			if len(u.Object) > 0 {
				out = append(out, u)
			}
		}
	}
	return out
}

// applyOperatorManifests applies the shipped operator manifests (the
// namespace, RBAC and the admission policy among them) as the tests' owner.
func applyOperatorManifests(t *testing.T, c client.Client) {
	t.Helper()
	for _, o := range readManifests(t, "operator/operator.yaml") {
		require.NoError(t, c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("manifests-test"), client.ForceOwnership))
	}
}

func TestManifestsApply(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	ctx := context.Background()
	objs := readManifests(t, "operator/operator.yaml", "rbac/role.yaml", "samples/policy.yaml")
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
		// The sample goes through a server-side dry run (the tests own the
		// policy); everything else is applied for real.
		var err error
		if o.GetKind() == "SandboxGPUPolicy" {
			err = c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.DryRunAll, client.FieldOwner("manifests-test"), client.ForceOwnership)
		} else {
			err = c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("manifests-test"), client.ForceOwnership)
		}
		require.NoError(t, err, "%s %s", o.GetKind(), o.GetName())
	}
	for _, k := range []string{"ClusterRole", "Role", "Deployment", "ValidatingAdmissionPolicy", "SandboxGPUPolicy"} {
		assert.True(t, kinds[k], k)
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" || o.GetKind() == "Role" {
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				assert.NotContains(t, res, "secrets", "%s %s must not read secrets", o.GetKind(), o.GetName())
			}
		}
	}
}

func TestPolicyValidation(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	ctx := context.Background()
	bad := map[string]string{
		"not named default":              "apiVersion: sandbox-gpu.io/v1alpha1\nkind: SandboxGPUPolicy\nmetadata: {name: other}\nspec: {}\n",
		"unknown mode":                   "apiVersion: sandbox-gpu.io/v1alpha1\nkind: SandboxGPUPolicy\nmetadata: {name: default}\nspec: {sandboxWorkloads: {enabled: true, mode: firecracker}}\n",
		"unknown default":                "apiVersion: sandbox-gpu.io/v1alpha1\nkind: SandboxGPUPolicy\nmetadata: {name: default}\nspec: {sandboxWorkloads: {defaultWorkload: vm}}\n",
		"vgpu manager enabled, no image": "apiVersion: sandbox-gpu.io/v1alpha1\nkind: SandboxGPUPolicy\nmetadata: {name: default}\nspec: {vgpuManager: {enabled: true}}\n",
	}
	for name, y := range bad {
		u := &unstructured.Unstructured{}
		require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(y), 512).Decode(&u.Object))
		err := c.Create(ctx, u, client.DryRunAll)
		assert.Error(t, err, name)
	}
}

// The admission policy lets a node daemon (its service account token
// carries the node name) change its own Node and nothing else.
func TestNodeDaemonMayChangeOnlyItsOwnNode(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	applyOperatorManifests(t, c)
	newNode(t, c, "vap-a", nil)
	newNode(t, c, "vap-b", nil)
	daemon := daemonClient(t, names.Validator, "vap-a")
	annotate := func(name string) error {
		return patchNode(daemon, name, func(n *corev1.Node) {
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[names.PermittedAnnotation] = "{}"
		})
	}
	// The policy takes effect once the API server has loaded it.
	waitOwnNodeOnly(t, "the admission policy denies another node", func() error { return annotate("vap-b") })
	require.NoError(t, annotate("vap-a"), "its own node is fine")

	// On its own Node: the validator's annotation is fine; anything that
	// would change scheduling or the workload is not.
	change := func(mutate func(n *corev1.Node)) error { return patchNode(daemon, "vap-a", mutate) }
	require.NoError(t, change(func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[names.PermittedAnnotation] = "{}"
	}))
	for what, mutate := range map[string]func(n *corev1.Node){
		"spec":             func(n *corev1.Node) { n.Spec.Unschedulable = true },
		"a foreign label":  func(n *corev1.Node) { n.Labels["node-restriction.kubernetes.io/x"] = "y" },
		"the config label": func(n *corev1.Node) { n.Labels[names.WorkloadConfigLabel] = "vm-passthrough" },
		"a deploy label":   func(n *corev1.Node) { n.Labels[names.DeployLabel(names.VFIOManager)] = "true" },
		"removing a label": func(n *corev1.Node) { delete(n.Labels, "feature.node.kubernetes.io/pci-10de.present") },
		"a foreign annotation": func(n *corev1.Node) {
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations["example.com/x"] = "y"
		},
	} {
		err := change(mutate)
		require.Error(t, err, what)
		assert.Contains(t, err.Error(), "sandbox-gpu node daemons may", what)
	}
}

// The GPU discovery agent's account may set and remove its own Node's
// sandbox-gpu.io/gpu.* labels and change nothing else, not even what the
// other node daemons may.
func TestDiscoveryAgentMayChangeOnlyItsGPULabels(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	ctx := context.Background()
	applyOperatorManifests(t, c)
	newNode(t, c, "disc-vap-a", nil)
	newNode(t, c, "disc-vap-b", nil)
	agent := daemonClient(t, names.GPUDiscovery, "disc-vap-a")
	change := func(node string, mutate func(n *corev1.Node)) error { return patchNode(agent, node, mutate) }
	label := func(k, v string) func(n *corev1.Node) { return func(n *corev1.Node) { n.Labels[k] = v } }
	waitOwnNodeOnly(t, "the admission policy denies the agent another node", func() error {
		return change("disc-vap-b", label(names.GPUPresentLabel, "true"))
	})
	require.NoError(t, change("disc-vap-a", func(n *corev1.Node) {
		n.Labels[names.GPUPresentLabel] = "true"
		n.Labels[names.GPUCountLabel] = "8"
	}), "its own GPU labels")
	require.NoError(t, change("disc-vap-a", label(names.GPUCountLabel, "7")))
	require.NoError(t, change("disc-vap-a", func(n *corev1.Node) {
		delete(n.Labels, names.GPUPresentLabel)
		delete(n.Labels, names.GPUCountLabel)
	}), "removing them")
	// What the other node daemons may do too is refused by the agent's own
	// rule; the rest already by the node daemons' rules.
	ownRule, daemonRule := "sandbox-gpu-discovery may change only sandbox-gpu.io/gpu.*, not", "sandbox-gpu node daemons may"
	annotationRule := "sandbox-gpu-discovery may change none, not " + names.PermittedAnnotation
	for what, tc := range map[string]struct {
		mutate func(n *corev1.Node)
		want   string
	}{
		"another sandbox-gpu.io label": {label("sandbox-gpu.io/probe", "x"), ownRule},
		"a sandbox-gpu.io annotation": {func(n *corev1.Node) {
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[names.PermittedAnnotation] = "{}"
		}, annotationRule},
		"a deploy label":           {label(names.DeployLabel(names.VFIOManager), "true"), daemonRule},
		"the config label":         {label(names.WorkloadConfigLabel, "vm-passthrough"), daemonRule},
		"removing a foreign label": {func(n *corev1.Node) { delete(n.Labels, "feature.node.kubernetes.io/pci-10de.present") }, daemonRule},
		"the spec":                 {func(n *corev1.Node) { n.Spec.Unschedulable = true }, daemonRule},
	} {
		err := change("disc-vap-a", tc.mutate)
		require.Error(t, err, what)
		assert.Contains(t, err.Error(), tc.want, what)
	}
	err := agent.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "disc-vap-a"}})
	require.Error(t, err, "no delete, not even of its own Node")
}
