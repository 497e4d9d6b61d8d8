package helm

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// uninstallEventsRBAC is the uninstall hook's Role (and binding) for Node
// events, in namespace default.
const uninstallEventsRBAC = "sandbox-gpu-uninstall-events"

// hooks returns the rendered objects of a Helm hook, by kind/name.
func hooks(objs []*unstructured.Unstructured, hook string) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetAnnotations()["helm.sh/hook"] == hook {
			out[o.GetKind()+"/"+o.GetName()] = o
		}
	}
	return out
}

// TestUninstallHook: helm uninstall first runs `sandbox-gpu-operator
// uninstall` as a pre-delete Job (the operator's image, pull secrets and
// pull policy, uninstall.timeout), with its own account whose RBAC is
// created before it (hook weights) and can do what the command does:
// delete the policy and patch its finalizer, read node states and Nodes,
// create events in default. Each hook object goes once it succeeded (no
// leftover after an uninstall) and is replaced on a retry. The objects
// pass a server-side dry run; uninstall.releaseGPUs=false renders none.
func TestUninstallHook(t *testing.T) {
	requireEnv(t)
	objs := mustRender(t, "operator.imagePullSecrets={regcred}", "operator.version=v9.9.9", "uninstall.timeout=90s")
	h := hooks(objs, "pre-delete")
	var keys []string
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"ClusterRole/sandbox-gpu-uninstall", "ClusterRoleBinding/sandbox-gpu-uninstall", "Job/sandbox-gpu-uninstall",
		"Role/" + uninstallEventsRBAC, "RoleBinding/" + uninstallEventsRBAC, "ServiceAccount/sandbox-gpu-uninstall"}
	if !slices.Equal(keys, want) {
		t.Fatalf("pre-delete hooks %v, want %v", keys, want)
	}
	for k, o := range h {
		a := o.GetAnnotations()
		if a["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s: hook-delete-policy %q", k, a["helm.sh/hook-delete-policy"])
		}
		wantWeight := "-10"
		if o.GetKind() == "Job" {
			wantWeight = "0"
		}
		if a["helm.sh/hook-weight"] != wantWeight {
			t.Errorf("%s: hook-weight %q, want %q (RBAC before the Job)", k, a["helm.sh/hook-weight"], wantWeight)
		}
	}

	job := h["Job/sandbox-gpu-uninstall"]
	if job.GetNamespace() != releaseNamespace {
		t.Errorf("Job in %q, want the operator's namespace %q", job.GetNamespace(), releaseNamespace)
	}
	podSpec, _, _ := unstructured.NestedMap(job.Object, "spec", "template", "spec")
	if podSpec["serviceAccountName"] != "sandbox-gpu-uninstall" || podSpec["restartPolicy"] != "Never" {
		t.Errorf("Job pod: account %v, restartPolicy %v", podSpec["serviceAccountName"], podSpec["restartPolicy"])
	}
	secrets, _, _ := unstructured.NestedSlice(podSpec, "imagePullSecrets")
	if len(secrets) != 1 || secrets[0].(map[string]interface{})["name"] != "regcred" {
		t.Errorf("Job pull secrets %v, want regcred", secrets)
	}
	ctrs, _, _ := unstructured.NestedSlice(podSpec, "containers")
	c := ctrs[0].(map[string]interface{})
	if c["image"] != "ghcr.io/sandbox-gpu/sandbox-gpu-operator:v9.9.9" {
		t.Errorf("Job image %v, want the operator's", c["image"])
	}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	if !slices.Equal(args, []string{"uninstall", "--timeout=90s"}) {
		t.Errorf("Job args %v", args)
	}

	cr := h["ClusterRole/sandbox-gpu-uninstall"]
	rules, _, _ := unstructured.NestedSlice(cr.Object, "rules")
	var got []string
	for _, r := range rules {
		m := r.(map[string]interface{})
		res, _, _ := unstructured.NestedStringSlice(m, "resources")
		verbs, _, _ := unstructured.NestedStringSlice(m, "verbs")
		got = append(got, strings.Join(res, ",")+":"+strings.Join(verbs, ","))
	}
	if want := []string{"sandboxgpupolicies:get,delete,patch", "sandboxgpunodes:list", "nodes:get"}; !slices.Equal(got, want) {
		t.Errorf("uninstall ClusterRole rules %v, want %v", got, want)
	}
	role := h["Role/"+uninstallEventsRBAC]
	if role.GetNamespace() != "default" {
		t.Errorf("events Role in %q, want default", role.GetNamespace())
	}
	mustDryRunAll(t, objs)

	if h := hooks(mustRender(t, "uninstall.releaseGPUs=false"), "pre-delete"); len(h) != 0 {
		t.Errorf("uninstall.releaseGPUs=false rendered hooks %v", h)
	}
}

// TestTransitionMaxUnavailable: the policy's spec.transition.maxUnavailable
// from transition.maxUnavailable, a number or a percentage; the CRD's rule
// refuses 0 in a dry run.
func TestTransitionMaxUnavailable(t *testing.T) {
	requireEnv(t)
	for set, want := range map[string]intstr.IntOrString{"": intstr.FromInt32(1), "transition.maxUnavailable=3": intstr.FromInt32(3),
		"transition.maxUnavailable=25%": intstr.FromString("25%")} {
		var sets []string
		if set != "" {
			sets = append(sets, set)
		}
		objs := mustRender(t, sets...)
		p := policy(t, objs)
		v, _, _ := unstructured.NestedFieldNoCopy(p.Object, "spec", "transition", "maxUnavailable")
		var got intstr.IntOrString
		switch x := v.(type) {
		case int64:
			got = intstr.FromInt32(int32(x))
		case float64: // how the YAML decoder reads a number
			got = intstr.FromInt32(int32(x))
		case string:
			got = intstr.FromString(x)
		default:
			t.Errorf("%q: maxUnavailable %#v (%T)", set, v, v)
			continue
		}
		if got != want {
			t.Errorf("%q: maxUnavailable %s, want %s", set, got.String(), want.String())
		}
		mustDryRunAll(t, objs)
	}
	p := policy(t, mustRender(t, "transition.maxUnavailable=0"))
	if err := dryRun(t.Context(), p); err == nil || !strings.Contains(err.Error(), "transition.maxUnavailable is a number of nodes (at least 1)") {
		t.Errorf("maxUnavailable 0 passed the dry run (err %v)", err)
	}
}

// TestKustomizeUninstallMatchesTheHook: manifests/uninstall/uninstall.yaml,
// the uninstall Job for the kustomize install, is the chart's hook with
// its default values, without the hook annotations.
func TestKustomizeUninstallMatchesTheHook(t *testing.T) {
	requireEnv(t)
	f, err := os.ReadFile(filepath.Join("..", "..", "manifests", "uninstall", "uninstall.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kust, err := split(string(f))
	if err != nil {
		t.Fatal(err)
	}
	chart := hooks(mustRender(t, "operator.version=v0.1.0"), "pre-delete")
	if len(kust) != len(chart) {
		t.Errorf("manifests/uninstall has %d objects, the chart's hook %d", len(kust), len(chart))
	}
	for _, k := range kust {
		c, ok := chart[k.GetKind()+"/"+k.GetName()]
		if !ok {
			t.Errorf("%s/%s is not in the chart's hook", k.GetKind(), k.GetName())
			continue
		}
		if len(k.GetAnnotations()) != 0 {
			t.Errorf("%s/%s: annotations %v in the kustomize manifest", k.GetKind(), k.GetName(), k.GetAnnotations())
		}
		for _, path := range [][]string{{"metadata", "namespace"}, {"rules"}, {"roleRef"}, {"subjects"}, {"spec"}} {
			kv, _, _ := unstructured.NestedFieldNoCopy(k.Object, path...)
			cv, _, _ := unstructured.NestedFieldNoCopy(c.Object, path...)
			if !reflect.DeepEqual(kv, cv) {
				t.Errorf("%s/%s %v differs:\nmanifests: %#v\nchart:     %#v", k.GetKind(), k.GetName(), path, kv, cv)
			}
		}
	}
	mustDryRunAll(t, kust)
}
