package helm

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// nodeEventsRBAC names the Role and RoleBinding that let the node daemons
// create Events in namespace default.
const nodeEventsRBAC = "sandbox-gpu-node-events"

// typedPolicy converts the rendered policy to its Go type, as the API server
// and the operator see it.
func typedPolicy(t *testing.T, objs []*unstructured.Unstructured) *v1alpha1.SandboxGPUPolicy {
	t.Helper()
	var p v1alpha1.SandboxGPUPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(policy(t, objs).Object, &p, true); err != nil {
		t.Fatalf("rendered policy: %v", err)
	}
	return &p
}

// The GPU Operator's install command for vGPU works as it is: repository,
// image and version make the image the operator deploys on vm-vgpu nodes
// (with their OS appended), the registry secret pulls it, env reaches the
// driver container.
func TestVGPUManagerAsTheGPUOperatorInstallsIt(t *testing.T) {
	requireEnv(t)
	objs := mustRender(t, "sandboxWorkloads.enabled=true", "sandboxWorkloads.defaultWorkload=vm-vgpu",
		"vgpuManager.enabled=true", "vgpuManager.repository=nvcr.io/example-org/vgpu", "vgpuManager.image=vgpu-manager",
		"vgpuManager.version=550.90.05", "vgpuManager.imagePullSecrets={ngc-secret}",
		"vgpuManager.env[0].name=DELAY_BEFORE_VF_CREATION", "vgpuManager.env[0].value=30", // --set makes 30 a number
		"vgpuManager.env[1].name=HOST", "vgpuManager.env[1].valueFrom.fieldRef.fieldPath=spec.nodeName")
	wantSpec(t, policy(t, objs), map[string]interface{}{
		"vgpuManager.enabled":          true,
		"vgpuManager.repository":       "nvcr.io/example-org/vgpu",
		"vgpuManager.image":            "vgpu-manager",
		"vgpuManager.version":          "550.90.05",
		"vgpuManager.imagePullSecrets": []interface{}{"ngc-secret"},
		"vgpuManager.env": []interface{}{map[string]interface{}{"name": "DELAY_BEFORE_VF_CREATION", "value": "30"},
			map[string]interface{}{"name": "HOST", "valueFrom": map[string]interface{}{"fieldRef": map[string]interface{}{"fieldPath": "spec.nodeName"}}}},
	})
	mustDryRunAll(t, objs)

	p := typedPolicy(t, objs)
	ds, err := operands.Build(names.VGPUManager, &p.Spec, operands.Options{Namespace: releaseNamespace, Registry: "r", Version: "v", OSTag: "ubuntu22.04"})
	if err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if want := "nvcr.io/example-org/vgpu/vgpu-manager:550.90.05-ubuntu22.04"; c.Image != want {
		t.Errorf("vGPU host driver image %q, want %q", c.Image, want)
	}
	if !slices.Contains(ds.Spec.Template.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: "ngc-secret"}) {
		t.Errorf("pull secrets %v lack ngc-secret", ds.Spec.Template.Spec.ImagePullSecrets)
	}
	if !slices.Contains(c.Env, corev1.EnvVar{Name: "DELAY_BEFORE_VF_CREATION", Value: "30"}) {
		t.Errorf("env %v lacks DELAY_BEFORE_VF_CREATION", c.Env)
	}

	// Kubernetes-style secrets and a whole image reference work too.
	objs = mustRender(t, "vgpuManager.enabled=true", "vgpuManager.image=registry.example/nvidia/vgpu-manager:550.90.05-ubuntu22.04",
		"vgpuManager.imagePullSecrets[0].name=regcred")
	wantSpec(t, policy(t, objs), map[string]interface{}{
		"vgpuManager.image":            "registry.example/nvidia/vgpu-manager:550.90.05-ubuntu22.04",
		"vgpuManager.imagePullSecrets": []interface{}{"regcred"},
	})
	mustDryRunAll(t, objs)
	if _, err := render("vgpuManager.imagePullSecrets[0].nam=typo"); err == nil || !strings.Contains(err.Error(), "vgpuManager.imagePullSecrets") {
		t.Errorf("an entry without a name rendered (err %v), want a failure naming vgpuManager.imagePullSecrets", err)
	}
}

// Enabling the vGPU host driver without naming NVIDIA's private image is
// refused at install by the CRD's rules, with the GPU Operator's default
// image name as well as with none.
func TestVGPUManagerWithoutItsImageRejected(t *testing.T) {
	requireEnv(t)
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"vgpuManager.enabled=true"}, "vgpuManager.image is required"}, // image: vgpu-manager, no registry
		{[]string{"vgpuManager.enabled=true", "vgpuManager.image="}, "vgpuManager.image is required"},
		{[]string{"vgpuManager.enabled=true", "vgpuManager.repository=nvcr.io/example-org/vgpu"}, "vgpuManager.version is required"},
	} {
		p := policy(t, mustRender(t, tc.sets...))
		err := dryRun(t.Context(), p)
		if err == nil {
			t.Errorf("%v: dry run accepted, want the CRD's rule to refuse it", tc.sets)
			continue
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: dry run error = %v, want Invalid with %q", tc.sets, err, tc.want)
		}
	}
	// Disabled, the default image name is fine.
	if err := dryRun(t.Context(), policy(t, mustRender(t))); err != nil {
		t.Error(err)
	}
}

// The vGPU device manager's values reach its DaemonSet: the ConfigMap
// (default: the one the operator keeps) and the default config entry.
func TestVGPUDeviceManagerValues(t *testing.T) {
	requireEnv(t)
	build := func(objs []*unstructured.Unstructured) *corev1.Container {
		t.Helper()
		p := typedPolicy(t, objs)
		ds, err := operands.Build(names.VGPUDeviceManager, &p.Spec, operands.Options{Namespace: releaseNamespace, Registry: "r", Version: "v"})
		if err != nil {
			t.Fatal(err)
		}
		if got := ds.Spec.Template.Spec.Volumes[len(ds.Spec.Template.Spec.Volumes)-1].ConfigMap; got == nil || got.Name != operands.VGPUConfigMap(&p.Spec) {
			t.Errorf("config volume %v, want ConfigMap %s", got, operands.VGPUConfigMap(&p.Spec))
		}
		return &ds.Spec.Template.Spec.Containers[0]
	}
	objs := mustRender(t)
	if _, found, _ := unstructured.NestedString(policy(t, objs).Object, "spec", "vgpuDeviceManager", "config", "name"); found {
		t.Error("config.name rendered by default")
	}
	if c := build(objs); !slices.Contains(c.Args, "--default=default") {
		t.Errorf("default args %v lack --default=default", c.Args)
	}
	if got := operands.VGPUConfigMap(&typedPolicy(t, objs).Spec); got != operands.DefaultVGPUConfigMap {
		t.Errorf("default ConfigMap %s, want the operator's %s", got, operands.DefaultVGPUConfigMap)
	}
	objs = mustRender(t, "vgpuDeviceManager.config.name=site-vgpu-config", "vgpuDeviceManager.config.default=A10-4Q",
		"vgpuDeviceManager.repository=registry.example/mirror", "vgpuDeviceManager.image=vgpu-device-manager", "vgpuDeviceManager.version=v2")
	wantSpec(t, policy(t, objs), map[string]interface{}{
		"vgpuDeviceManager.config.name":    "site-vgpu-config",
		"vgpuDeviceManager.config.default": "A10-4Q",
		"vgpuDeviceManager.image":          "registry.example/mirror/vgpu-device-manager:v2",
	})
	mustDryRunAll(t, objs)
	c := build(objs)
	if !slices.Contains(c.Args, "--default=A10-4Q") || c.Image != "registry.example/mirror/vgpu-device-manager:v2" {
		t.Errorf("DaemonSet args %v image %s", c.Args, c.Image)
	}
	p := policy(t, mustRender(t, "vgpuDeviceManager.config.name=Not_A_Name"))
	if err := dryRun(t.Context(), p); err == nil || !apierrors.IsInvalid(err) {
		t.Errorf("a ConfigMap name that is no DNS name: %v, want Invalid", err)
	}
}

// Kata takes no vGPU: a Kata policy with vm-vgpu as the default is refused.
func TestKataWithVGPUDefaultRejected(t *testing.T) {
	requireEnv(t)
	p := policy(t, mustRender(t, "sandboxWorkloads.enabled=true", "sandboxWorkloads.mode=kata", "sandboxWorkloads.defaultWorkload=vm-vgpu"))
	err := dryRun(t.Context(), p)
	if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "Kata takes no vGPU") {
		t.Errorf("dry run error = %v, want Invalid: Kata takes no vGPU", err)
	}
	if err := dryRun(t.Context(), policy(t, mustRender(t, "sandboxWorkloads.enabled=true", "sandboxWorkloads.mode=kubevirt",
		"sandboxWorkloads.defaultWorkload=vm-vgpu"))); err != nil {
		t.Error(err)
	}
}

// The node daemons may create Events in default, nothing else there.
func TestNodeDaemonsEventsRole(t *testing.T) {
	requireEnv(t)
	objs := mustRender(t)
	var role *unstructured.Unstructured
	for _, r := range byKind(objs, "Role") {
		if r.GetName() == nodeEventsRBAC {
			role = r
		}
	}
	if role == nil {
		t.Fatalf("no Role %s rendered", nodeEventsRBAC)
	}
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	want := []interface{}{map[string]interface{}{"apiGroups": []interface{}{""}, "resources": []interface{}{"events"}, "verbs": []interface{}{"create"}}}
	if role.GetNamespace() != "default" || !reflect.DeepEqual(rules, want) {
		t.Errorf("Role %s in %q with rules %v, want events create in default", nodeEventsRBAC, role.GetNamespace(), rules)
	}
}
