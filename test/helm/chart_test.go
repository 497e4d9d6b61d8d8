package helm

import (
	"reflect"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// wantSpec checks that every dotted path under obj's spec holds the wanted value.
func wantSpec(t *testing.T, obj *unstructured.Unstructured, want map[string]interface{}) {
	t.Helper()
	for p, w := range want {
		got, found, err := unstructured.NestedFieldNoCopy(obj.Object, append([]string{"spec"}, strings.Split(p, ".")...)...)
		switch {
		case err != nil:
			t.Errorf("spec.%s: %v", p, err)
		case !found:
			t.Errorf("spec.%s missing, want %v", p, w)
		case !reflect.DeepEqual(got, w):
			t.Errorf("spec.%s = %#v, want %#v", p, got, w)
		}
	}
}

func TestChartKubeVersionMatchesServer(t *testing.T) {
	requireEnv(t)
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	if kv := chrt.Metadata.KubeVersion; !chartutil.IsCompatibleRange(kv, serverVersion) {
		t.Errorf("chart kubeVersion %q excludes the envtest kube-apiserver %s", kv, serverVersion)
	}
}

func TestDefaultsRenderAndDryRun(t *testing.T) {
	requireEnv(t)
	objs := mustRender(t)
	counts := map[string]int{}
	for _, obj := range objs {
		counts[obj.GetKind()]++
	}
	want := map[string]int{
		// The operator's account and one per operand (operands.ServiceAccounts); ClusterRoles: the
		// operator's, sandbox-gpu-node, sandbox-gpu-node-report and sandbox-gpu-discovery.
		"Namespace": 1, "ServiceAccount": 1 + len(operands.ServiceAccounts()), "Deployment": 1, "ClusterRole": 4, "Role": 2, "ClusterRoleBinding": 4,
		// Admission: the node daemons' Node and Events policies, the operator's bounds, images and evictions.
		"RoleBinding": 2, "ValidatingAdmissionPolicy": 5, "ValidatingAdmissionPolicyBinding": 5,
		"SandboxGPUPolicy": 1,
	}
	// The uninstall hook (uninstall_test.go): its account, RBAC and Job.
	for kind, n := range map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "Job": 1} {
		want[kind] += n
	}
	if !reflect.DeepEqual(counts, want) {
		t.Errorf("rendered kinds = %v, want %v", counts, want)
	}
	wantSpec(t, policy(t, objs), map[string]interface{}{
		"sandboxWorkloads.enabled":         false,
		"sandboxWorkloads.mode":            "kubevirt",
		"sandboxWorkloads.defaultWorkload": "container",
		"vgpuManager.enabled":              false,
		"gpuDiscovery.enabled":             true,
	})
	mustDryRunAll(t, objs)
}

func TestPolicyMirrorsGPUOperatorKnobs(t *testing.T) {
	requireEnv(t)
	objs := mustRender(t,
		"sandboxWorkloads.enabled=true",
		"sandboxWorkloads.mode=kata",
		"sandboxWorkloads.defaultWorkload=vm-passthrough",
		"vfioManager.enabled=false",
		"sandboxDevicePlugin.enabled=false",
		"kataSandboxDevicePlugin.enabled=true",
		"vgpuDeviceManager.enabled=true",
		"vgpuDeviceManager.config.name=vgpu-cfg",
		"nriPlugin.enabled=false",
	)
	p := policy(t, objs)
	if p.GetName() != "default" {
		t.Errorf("policy name = %q, want default", p.GetName())
	}
	wantSpec(t, p, map[string]interface{}{
		"sandboxWorkloads.enabled":         true,
		"sandboxWorkloads.mode":            "kata",
		"sandboxWorkloads.defaultWorkload": "vm-passthrough",
		"vfioManager.enabled":              false,
		"sandboxDevicePlugin.enabled":      false,
		"kataSandboxDevicePlugin.enabled":  true,
		"vgpuDeviceManager.enabled":        true,
		"vgpuDeviceManager.config.name":    "vgpu-cfg",
		"nriPlugin.enabled":                false,
	})
	if err := dryRun(t.Context(), p); err != nil {
		t.Error(err)
	}
	mustDryRunAll(t, objs)
}

func TestCreatePolicyFalseRendersNoPolicy(t *testing.T) {
	requireEnv(t)
	objs := mustRender(t, "createPolicy=false")
	if ps := byKind(objs, "SandboxGPUPolicy"); len(ps) != 0 {
		t.Errorf("createPolicy=false rendered %d SandboxGPUPolicy objects, want none", len(ps))
	}
	mustDryRunAll(t, objs)
}

func TestOperatorNamespaceOverride(t *testing.T) {
	requireEnv(t)
	objs := mustRender(t, "operator.namespace="+otherNamespace)
	for _, kind := range []string{"Deployment", "ServiceAccount", "Role", "RoleBinding"} {
		got := byKind(objs, kind)
		if len(got) == 0 {
			t.Errorf("no %s rendered", kind)
		}
		for _, obj := range got {
			if obj.GetName() == nodeEventsRBAC || obj.GetName() == uninstallEventsRBAC {
				if obj.GetNamespace() != "default" {
					t.Errorf("%s %s in namespace %q, want default (where the node daemons' Events go)", kind, obj.GetName(), obj.GetNamespace())
				}
				continue
			}
			if obj.GetNamespace() != otherNamespace {
				t.Errorf("%s %s in namespace %q, want %q", kind, obj.GetName(), obj.GetNamespace(), otherNamespace)
			}
		}
	}
	for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
		for _, obj := range byKind(objs, kind) {
			subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, s := range subjects {
				if ns, _, _ := unstructured.NestedString(s.(map[string]interface{}), "namespace"); ns != otherNamespace {
					t.Errorf("%s %s subject namespace %q, want %q", kind, obj.GetName(), ns, otherNamespace)
				}
			}
		}
	}
	for _, d := range byKind(objs, "Deployment") {
		if !strings.Contains(strings.Join(containerArgs(d), " "), "--namespace="+otherNamespace) {
			t.Errorf("Deployment %s args %v lack --namespace=%s", d.GetName(), containerArgs(d), otherNamespace)
		}
	}
	// Every admission policy names the accounts of the operator's namespace, never the default one's.
	vaps := byKind(objs, "ValidatingAdmissionPolicy")
	if len(vaps) != 5 {
		t.Fatalf("rendered %d ValidatingAdmissionPolicy objects, want 5", len(vaps))
	}
	for _, vap := range vaps {
		conds, _, _ := unstructured.NestedSlice(vap.Object, "spec", "matchConditions")
		want := "system:serviceaccount:" + otherNamespace + ":sandbox-gpu-"
		var matched bool
		for _, c := range conds {
			expr, _, _ := unstructured.NestedString(c.(map[string]interface{}), "expression")
			if strings.Contains(expr, "'"+want) {
				matched = true
			}
			if strings.Contains(expr, "system:serviceaccount:"+releaseNamespace+":") {
				t.Errorf("%s: matchCondition %q still names the default namespace", vap.GetName(), expr)
			}
		}
		if !matched {
			t.Errorf("ValidatingAdmissionPolicy %s matchConditions %v do not name %s...", vap.GetName(), conds, want)
		}
	}
	mustDryRunAll(t, objs)
}

// containerArgs returns the args of every container in a Deployment.
func containerArgs(d *unstructured.Unstructured) []string {
	var args []string
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		a, _, _ := unstructured.NestedStringSlice(c.(map[string]interface{}), "args")
		args = append(args, a...)
	}
	return args
}
