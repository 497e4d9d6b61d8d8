package helm

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// kustomizeOperator decodes manifests/operator/operator.yaml, the
// kustomize install.
func kustomizeOperator(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "manifests", "operator", "operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// The kustomize install (manifests/) and the chart with its defaults
// install the same objects: namespace labels, service accounts, the node
// daemons' and the discovery agent's RBAC, the admission policy and the
// operator's pod.
func TestKustomizeManifestsMatchTheChart(t *testing.T) {
	requireEnv(t)
	chart := map[string]*unstructured.Unstructured{}
	for _, o := range mustRender(t) {
		chart[o.GetKind()+"/"+o.GetName()] = o
	}
	fields := map[string][][]string{
		"Namespace":                        {{"metadata", "labels"}},
		"ServiceAccount":                   {{"metadata", "namespace"}, {"automountServiceAccountToken"}},
		"ClusterRole":                      {{"rules"}},
		"Role":                             {{"metadata", "namespace"}, {"rules"}},
		"ClusterRoleBinding":               {{"roleRef"}, {"subjects"}},
		"RoleBinding":                      {{"metadata", "namespace"}, {"roleRef"}, {"subjects"}},
		"ValidatingAdmissionPolicy":        {{"spec"}},
		"ValidatingAdmissionPolicyBinding": {{"spec"}},
		"Deployment":                       {{"spec", "template", "spec"}},
	}
	seen := 0
	for _, k := range kustomizeOperator(t) {
		key := k.GetKind() + "/" + k.GetName()
		c, ok := chart[key]
		if !ok {
			t.Errorf("%s is in manifests/operator/operator.yaml but not in the chart", key)
			continue
		}
		seen++
		for _, path := range fields[k.GetKind()] {
			kv, _, _ := unstructured.NestedFieldNoCopy(k.Object, path...)
			cv, _, _ := unstructured.NestedFieldNoCopy(c.Object, path...)
			if !reflect.DeepEqual(kv, cv) {
				t.Errorf("%s %v differs:\nmanifests: %#v\nchart:     %#v", key, path, kv, cv)
			}
		}
	}
	for _, want := range []string{"ServiceAccount/sandbox-gpu-discovery", "ClusterRole/sandbox-gpu-discovery",
		"ClusterRoleBinding/sandbox-gpu-discovery", "Namespace/sandbox-gpu", "Deployment/sandbox-gpu-operator",
		"Role/" + nodeEventsRBAC, "RoleBinding/" + nodeEventsRBAC} {
		if _, ok := chart[want]; !ok {
			t.Errorf("the chart lacks %s", want)
		}
	}
	if seen < 10 {
		t.Errorf("only %d objects compared", seen)
	}
}
