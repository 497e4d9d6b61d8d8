package helm

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// operatorContainer returns the operator Deployment's container, typed.
func operatorContainer(t *testing.T, objs []*unstructured.Unstructured) (*corev1.PodSpec, *corev1.Container) {
	t.Helper()
	ds := byKind(objs, "Deployment")
	if len(ds) != 1 {
		t.Fatalf("rendered %d Deployments, want 1", len(ds))
	}
	tmpl, _, err := unstructured.NestedMap(ds[0].Object, "spec", "template", "spec")
	if err != nil {
		t.Fatal(err)
	}
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(tmpl, &spec, true); err != nil {
		t.Fatalf("operator pod spec: %v", err)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("operator pod has %d containers, want 1", len(spec.Containers))
	}
	return &spec, &spec.Containers[0]
}

func appVersion(t *testing.T) string {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return chrt.Metadata.AppVersion
}

// The registry, tag, pull policy and pull secrets reach the operator's own
// pod and, as flags, every operand the operator builds.
func TestImagesRegistryTagAndPullSecrets(t *testing.T) {
	requireEnv(t)
	objs := mustRender(t)
	spec, c := operatorContainer(t, objs)
	v := appVersion(t)
	if want := "ghcr.io/sandbox-gpu/sandbox-gpu-operator:" + v; c.Image != want {
		t.Errorf("default image %q, want %q (the chart's appVersion)", c.Image, want)
	}
	for _, a := range []string{"--registry=ghcr.io/sandbox-gpu", "--operand-version=" + v, "--image-pull-policy=IfNotPresent"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("default args %v lack %s", c.Args, a)
		}
	}
	if len(spec.ImagePullSecrets) != 0 || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--image-pull-secret") }) {
		t.Errorf("pull secrets rendered by default: %v %v", spec.ImagePullSecrets, c.Args)
	}

	for _, secrets := range [][]string{
		{"operator.imagePullSecrets={regcred,mirror}"},                                            // GPU Operator style: names
		{"operator.imagePullSecrets[0].name=regcred", "operator.imagePullSecrets[1].name=mirror"}, // Kubernetes style
	} {
		objs = mustRender(t, append([]string{"operator.repository=registry.example:5000/mirror/sandbox-gpu",
			"operator.version=v9.9.9", "operator.imagePullPolicy=Always"}, secrets...)...)
		spec, c = operatorContainer(t, objs)
		if want := "registry.example:5000/mirror/sandbox-gpu/sandbox-gpu-operator:v9.9.9"; c.Image != want {
			t.Errorf("%v: image %q, want %q", secrets, c.Image, want)
		}
		if c.ImagePullPolicy != corev1.PullAlways {
			t.Errorf("%v: pull policy %q", secrets, c.ImagePullPolicy)
		}
		if want := []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}}; !reflect.DeepEqual(spec.ImagePullSecrets, want) {
			t.Errorf("%v: pod pull secrets %v, want %v", secrets, spec.ImagePullSecrets, want)
		}
		for _, a := range []string{"--registry=registry.example:5000/mirror/sandbox-gpu", "--operand-version=v9.9.9",
			"--image-pull-policy=Always", "--image-pull-secret=regcred", "--image-pull-secret=mirror"} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("%v: args %v lack %s", secrets, c.Args, a)
			}
		}
		mustDryRunAll(t, objs)
	}
	if _, err := render("operator.imagePullSecrets[0].nam=typo"); err == nil || !strings.Contains(err.Error(), "operator.imagePullSecrets") {
		t.Errorf("an entry without a name rendered (err %v), want a failure naming operator.imagePullSecrets", err)
	}
}

// An operand's image: a whole reference, or GPU Operator style repository,
// image and version; nothing by default (the operator's default applies).
func TestPerOperandImages(t *testing.T) {
	requireEnv(t)
	p := policy(t, mustRender(t))
	for _, op := range []string{"vfioManager", "sandboxDevicePlugin", "kataSandboxDevicePlugin", "vgpuDeviceManager", "nriPlugin", "validator", "gpuDiscovery"} {
		if img, found, _ := unstructured.NestedString(p.Object, "spec", op, "image"); found {
			t.Errorf("spec.%s.image = %q rendered by default", op, img)
		}
	}
	objs := mustRender(t, "vfioManager.image=registry.example/vfio-manager:dev",
		"gpuDiscovery.repository=nvcr.io/mirror", "gpuDiscovery.image=sandbox-gpu-validator", "gpuDiscovery.version=v2",
		"nriPlugin.repository=nvcr.io/mirror", "nriPlugin.image=nri-gpu-plugin")
	wantSpec(t, policy(t, objs), map[string]interface{}{
		"vfioManager.image":  "registry.example/vfio-manager:dev",
		"gpuDiscovery.image": "nvcr.io/mirror/sandbox-gpu-validator:v2",
		"nriPlugin.image":    "nvcr.io/mirror/nri-gpu-plugin",
	})
	mustDryRunAll(t, objs)
	wantSpec(t, policy(t, mustRender(t, "gpuDiscovery.enabled=false")), map[string]interface{}{"gpuDiscovery.enabled": false})
}

// The chart creates its namespace labelled for PodSecurity "privileged",
// which the privileged operands need: the VFIO manager's pod is admitted
// there and refused under "baseline".
func TestNamespaceForPodSecurity(t *testing.T) {
	requireEnv(t)
	nss := byKind(mustRender(t), "Namespace")
	if len(nss) != 1 || nss[0].GetName() != releaseNamespace {
		t.Fatalf("rendered namespaces %v, want %s", nss, releaseNamespace)
	}
	want := map[string]string{"pod-security.kubernetes.io/enforce": "privileged",
		"pod-security.kubernetes.io/audit": "privileged", "pod-security.kubernetes.io/warn": "privileged"}
	if !reflect.DeepEqual(nss[0].GetLabels(), want) {
		t.Errorf("namespace labels %v, want %v", nss[0].GetLabels(), want)
	}
	if got := byKind(mustRender(t, "createNamespace=false"), "Namespace"); len(got) != 0 {
		t.Errorf("createNamespace=false rendered %d namespaces", len(got))
	}
	if got := byKind(mustRender(t, "operator.namespace="+otherNamespace), "Namespace"); len(got) != 1 || got[0].GetName() != otherNamespace {
		t.Errorf("operator.namespace=%s rendered namespaces %v", otherNamespace, got)
	}

	ctx := t.Context()
	privileged := nss[0].DeepCopy()
	privileged.SetName("psa-privileged")
	if err := k8sClient.Create(ctx, privileged); err != nil {
		t.Fatal(err)
	}
	baseline := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "psa-baseline",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}
	if err := k8sClient.Create(ctx, baseline); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k8sClient.Delete(context.Background(), privileged)
		_ = k8sClient.Delete(context.Background(), baseline)
	})
	ops := []string{names.VFIOManager, names.VGPUDeviceManager, names.VGPUManager}
	for _, ns := range []string{privileged.GetName(), baseline.Name} {
		for _, op := range ops {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: operands.ServiceAccountName(op), Namespace: ns}}
			if err := k8sClient.Create(ctx, sa); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, op := range ops {
		if err := operandPod(ctx, t, op, privileged.GetName()); err != nil {
			t.Errorf("%s refused in the chart's namespace: %v", op, err)
		}
		if err := operandPod(ctx, t, op, baseline.Name); err == nil || !strings.Contains(err.Error(), "PodSecurity") {
			t.Errorf("%s under baseline: %v, want a PodSecurity refusal (so the label matters)", op, err)
		}
	}
}

// operandPod dry-runs the pod the operator's DaemonSet of op would create in ns.
func operandPod(ctx context.Context, t *testing.T, op, ns string) error {
	t.Helper()
	ds, err := operands.Build(op, &v1alpha1.SandboxGPUPolicySpec{}, operands.Options{Namespace: ns, Registry: "r", Version: "v"})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-probe", Namespace: ns}, Spec: ds.Spec.Template.Spec}
	pod.Spec.NodeName = "node-a"
	return k8sClient.Create(ctx, pod, client.DryRunAll)
}

// The chart has no test knob: the value that once pointed the operands at a simulated host
// (testing.hostRoot, the operator's --operand-host-root) changes nothing when a user sets it.
func TestNoTestingHostRoot(t *testing.T) {
	requireEnv(t)
	def, err := json.Marshal(mustRender(t))
	if err != nil {
		t.Fatal(err)
	}
	set, err := json.Marshal(mustRender(t, "testing.hostRoot=/var/lib/sandbox-gpu-test/host"))
	if err != nil {
		t.Fatal(err)
	}
	if string(def) != string(set) {
		t.Errorf("testing.hostRoot changes the rendered chart")
	}
	if strings.Contains(string(def), "host-root") {
		t.Errorf("the chart renders a host-root flag")
	}
}
