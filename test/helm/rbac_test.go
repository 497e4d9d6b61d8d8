package helm

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// access is one row of the least-privilege table: an identity (a service
// account of the release namespace) and a request it must (allow) or must
// not be granted.
type access struct {
	who                       string // service account name
	verb, group, resource, ns string // ns "": cluster-wide (every namespace)
	allow                     bool
}

// grants and denies build rows for one identity, one resource and several
// verbs; res is "resource", "resource/subresource", or "group:resource[/sub]".
func grants(who, res, ns string, verbs ...string) []access { return rows(who, res, ns, true, verbs) }
func denies(who, res, ns string, verbs ...string) []access { return rows(who, res, ns, false, verbs) }

func rows(who, res, ns string, allow bool, verbs []string) []access {
	group := ""
	if g, r, ok := strings.Cut(res, ":"); ok {
		group, res = g, r
	}
	var out []access
	for _, v := range verbs {
		out = append(out, access{who: who, verb: v, group: group, resource: res, ns: ns, allow: allow})
	}
	return out
}

const (
	operatorSA  = "sandbox-gpu-operator"
	uninstallSA = "sandbox-gpu-uninstall"
)

// leastPrivilege is the RBAC table (manifests/README.md has it in words):
// what each identity the chart creates may and may not do.
func leastPrivilege() []access {
	ns := releaseNamespace
	var t []access
	add := func(r ...[]access) {
		for _, x := range r {
			t = append(t, x...)
		}
	}
	// The operator: Nodes (deploy labels, not delete), pods to drain, its own
	// DaemonSets, ConfigMaps and lease in its namespace; no Secrets anywhere,
	// no ConfigMaps outside its namespace, no RBAC, no tokens.
	add(grants(operatorSA, "nodes", "", "get", "list", "watch", "patch"),
		grants(operatorSA, "pods", "", "get", "list", "watch"),
		grants(operatorSA, "pods/eviction", "workloads", "create"),
		grants(operatorSA, "events", "default", "create", "patch"),
		grants(operatorSA, "events.k8s.io:events", "default", "create"),
		grants(operatorSA, "kubevirt.io:kubevirts", "kubevirt", "get", "update"),
		grants(operatorSA, "node.k8s.io:runtimeclasses", "", "get", "list", "watch"),
		grants(operatorSA, "sandbox-gpu.io:sandboxgpunodes", "", "create", "delete", "list"),
		grants(operatorSA, "sandbox-gpu.io:sandboxgpunodes/status", "", "patch"),
		grants(operatorSA, "sandbox-gpu.io:sandboxgpupolicies", "", "get", "patch"),
		grants(operatorSA, "sandbox-gpu.io:sandboxgpupolicies/status", "", "patch"),
		grants(operatorSA, "sandbox-gpu.io:sandboxgpupolicies/finalizers", "", "update"),
		grants(operatorSA, "apps:daemonsets", ns, "create", "update", "delete"),
		grants(operatorSA, "configmaps", ns, "get", "create", "update", "delete"),
		grants(operatorSA, "coordination.k8s.io:leases", ns, "create", "update"),
		denies(operatorSA, "secrets", ns, "get", "list"),
		denies(operatorSA, "secrets", "", "list"),
		denies(operatorSA, "configmaps", "kube-system", "get"),
		denies(operatorSA, "configmaps", "", "list"),
		denies(operatorSA, "apps:daemonsets", "kube-system", "create"),
		denies(operatorSA, "nodes", "", "update", "delete"),
		denies(operatorSA, "pods", ns, "create", "delete"),
		denies(operatorSA, "sandbox-gpu.io:sandboxgpupolicies", "", "create", "delete"),
		denies(operatorSA, "serviceaccounts/token", ns, "create"),
		denies(operatorSA, "serviceaccounts", ns, "impersonate"),
		denies(operatorSA, "rbac.authorization.k8s.io:clusterrolebindings", "", "create"))
	// The uninstall hook: the policy (get, delete, patch its finalizer away),
	// node states to report progress, Nodes to name them, Events in default.
	add(grants(uninstallSA, "sandbox-gpu.io:sandboxgpupolicies", "", "get", "delete", "patch"),
		grants(uninstallSA, "sandbox-gpu.io:sandboxgpunodes", "", "list"),
		grants(uninstallSA, "nodes", "", "get"),
		grants(uninstallSA, "events", "default", "create"),
		denies(uninstallSA, "nodes", "", "list", "patch", "delete"),
		denies(uninstallSA, "sandbox-gpu.io:sandboxgpunodes", "", "delete"),
		denies(uninstallSA, "sandbox-gpu.io:sandboxgpupolicies", "", "create"),
		denies(uninstallSA, "events", "kube-system", "create"),
		denies(uninstallSA, "apps:daemonsets", ns, "delete"),
		denies(uninstallSA, "secrets", ns, "get"),
		denies(uninstallSA, "configmaps", "", "list"))
	// What no operand may do, token or not: no Node writes beyond a patch,
	// no ConfigMaps anywhere (the vGPU device manager's config is a mounted
	// ConfigMap), no Secrets, no pods, no Events outside default.
	for _, sa := range operands.ServiceAccounts() {
		add(denies(sa, "nodes", "", "update", "delete", "create"),
			denies(sa, "nodes/status", "", "patch", "update"),
			denies(sa, "configmaps", "", "get", "list", "watch"),
			denies(sa, "configmaps", ns, "get", "list", "watch"),
			denies(sa, "secrets", ns, "get", "list"),
			denies(sa, "pods", "", "list"),
			denies(sa, "events", "kube-system", "create"),
			denies(sa, "events", ns, "create"),
			denies(sa, "serviceaccounts/token", ns, "create"),
			denies(sa, "sandbox-gpu.io:sandboxgpupolicies", "", "get", "patch"),
			denies(sa, "sandbox-gpu.io:sandboxgpunodes", "", "get", "patch"))
	}
	// Operands that never talk to the API server: nothing at all (NVIDIA's
	// device plugin talks only to the kubelet).
	for _, op := range []string{names.KubeVirtDevicePlugin, names.KataDevicePlugin, names.NRIPlugin, names.NVIDIADevicePlugin, names.VGPUManager} {
		sa := operands.ServiceAccountName(op)
		add(denies(sa, "nodes", "", "get", "list", "watch", "patch"), denies(sa, "events", "default", "create"))
	}
	// Own-Node followers (the admission policy keeps each to its own Node):
	// the VFIO manager follows its Node's sandbox-gpu.io/vm-gpus and
	// patches the split's report.
	for _, op := range []string{names.Validator, names.VGPUDeviceManager, names.ReleaseOperand(names.VGPUDeviceManager), names.GPUDiscovery, names.VFIOManager} {
		add(grants(operands.ServiceAccountName(op), "nodes", "", "get", "list", "watch", "patch"))
	}
	// Events about their Node, in default: the vGPU device manager and its
	// release only.
	for _, op := range []string{names.VGPUDeviceManager, names.ReleaseOperand(names.VGPUDeviceManager)} {
		add(grants(operands.ServiceAccountName(op), "events", "default", "create"))
	}
	for _, op := range []string{names.Validator, names.GPUDiscovery, names.ReleaseOperand(names.VFIOManager), names.VFIOManager} {
		add(denies(operands.ServiceAccountName(op), "events", "default", "create"))
	}
	// The VFIO manager's release: one merge patch of its Node, no reads.
	vfioRelease := operands.ServiceAccountName(names.ReleaseOperand(names.VFIOManager))
	add(grants(vfioRelease, "nodes", "", "patch"), denies(vfioRelease, "nodes", "", "get", "list", "watch"))
	return t
}

// Least privilege, proven on a real API server: the chart's RBAC (its
// default values) is created in envtest and every row of leastPrivilege
// is one SubjectAccessReview for that service account (its user name and
// groups as a token gives them).
func TestLeastPrivilege(t *testing.T) {
	requireEnv(t)
	ctx := t.Context()
	var created []*unstructured.Unstructured
	for _, obj := range mustRender(t) {
		switch obj.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		if err := k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()), client.FieldOwner("rbac-test"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", obj.GetKind(), key(obj), err)
		}
		created = append(created, obj)
	}
	t.Cleanup(func() {
		for _, obj := range created {
			_ = k8sClient.Delete(context.Background(), obj.DeepCopy())
		}
	})

	table := leastPrivilege()
	// Every identity the chart binds a role to is in the table, and every
	// operand's account is.
	who := map[string]bool{}
	for _, r := range table {
		who[r.who] = true
	}
	for _, sa := range append(operands.ServiceAccounts(), operatorSA, uninstallSA) {
		if !who[sa] {
			t.Errorf("service account %s has no row", sa)
		}
	}
	for _, obj := range created {
		subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
		for _, s := range subjects {
			name, _, _ := unstructured.NestedString(s.(map[string]interface{}), "name")
			if !who[name] {
				t.Errorf("%s %s binds %s, which has no row", obj.GetKind(), obj.GetName(), name)
			}
		}
	}

	// The RBAC authorizer sees new bindings through its informers: the
	// granted rows are polled until they hold (or the deadline), then every
	// row is checked once.
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range table {
		if !r.allow {
			continue
		}
		for {
			ok, _, err := review(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if ok || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	for _, r := range table {
		ok, reason, err := review(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if ok != r.allow {
			t.Errorf("%s: allowed=%v, want %v (%s)", r, ok, r.allow, reason)
		}
	}
	t.Logf("%d SubjectAccessReviews, %d identities", len(table), len(who))
	// What RBAC grants the operator, admission bounds (admission_test.go).
	t.Run("operator admission", operatorAdmission)
}

func (r access) String() string {
	res := r.resource
	if r.group != "" {
		res = r.group + ":" + res
	}
	where := "cluster-wide"
	if r.ns != "" {
		where = "in " + r.ns
	}
	return fmt.Sprintf("%s %s %s %s", r.who, r.verb, res, where)
}

// review asks the API server whether r.who may do r.
func review(ctx context.Context, r access) (bool, string, error) {
	res, sub, _ := strings.Cut(r.resource, "/")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + releaseNamespace + ":" + r.who,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: r.ns, Verb: r.verb, Group: r.group,
			Resource: res, Subresource: sub},
	}}
	if err := k8sClient.Create(ctx, sar); err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview %s: %w", r, err)
	}
	return sar.Status.Allowed, sar.Status.Reason + sar.Status.EvaluationError, nil
}

// The chart's operand accounts are exactly the operator's
// (operands.ServiceAccounts), and each DaemonSet runs as its own.
func TestOneServiceAccountPerOperand(t *testing.T) {
	requireEnv(t)
	var got []string
	for _, sa := range byKind(mustRender(t), "ServiceAccount") {
		if n := sa.GetName(); n != operatorSA && n != uninstallSA {
			got = append(got, n)
			if a, found, _ := unstructured.NestedBool(sa.Object, "automountServiceAccountToken"); !found || a {
				t.Errorf("ServiceAccount %s: automountServiceAccountToken %v (found %v), want false (the pods that use the API turn it on)", n, a, found)
			}
		}
	}
	slices.Sort(got)
	if want := operands.ServiceAccounts(); !slices.Equal(got, want) {
		t.Errorf("operand service accounts %v, want %v", got, want)
	}
}
