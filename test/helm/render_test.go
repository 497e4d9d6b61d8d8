package helm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// releaseName and releaseNamespace are the release the tests render.
	releaseName      = "sandbox-gpu"
	releaseNamespace = "sandbox-gpu"
	// otherNamespace is the operator.namespace override the tests render.
	otherNamespace = "other"
)

// render loads the chart, coalesces its values with the --set style overrides in sets, renders it
// and splits the manifests into objects, in file order then document order.
func render(sets ...string) ([]*unstructured.Unstructured, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	overrides := map[string]interface{}{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, overrides); err != nil {
			return nil, fmt.Errorf("parse value %q: %w", s, err)
		}
	}
	opts := chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNamespace, IsInstall: true}
	vals, err := chartutil.ToRenderValues(chrt, overrides, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("coalesce values: %w", err)
	}
	files, err := engine.Render(chrt, vals)
	if err != nil {
		return nil, fmt.Errorf("render chart: %w", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, name := range names {
		got, err := split(files[name])
		if err != nil {
			return nil, fmt.Errorf("split %s: %w", name, err)
		}
		objs = append(objs, got...)
	}
	return objs, nil
}

// split decodes a multi-document YAML manifest, dropping empty documents.
func split(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("object without apiVersion/kind: %v", u.Object)
		}
		objs = append(objs, u)
	}
}

// mustRender renders the chart or fails the test.
func mustRender(t *testing.T, sets ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(sets...)
	if err != nil {
		t.Fatalf("render %v: %v", sets, err)
	}
	if len(objs) == 0 {
		t.Fatalf("render %v: no objects", sets)
	}
	return objs
}

// dryRun server-side applies obj with dryRun=All: admission, schema and CEL validation run, nothing
// is persisted.
func dryRun(ctx context.Context, obj *unstructured.Unstructured) error {
	err := k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()),
		client.DryRunAll, client.FieldOwner("helm-test"), client.ForceOwnership)
	if err != nil {
		return fmt.Errorf("dry-run apply %s %s: %w", obj.GetKind(), key(obj), err)
	}
	return nil
}

// mustDryRunAll dry-runs every object or fails the test.
func mustDryRunAll(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, obj := range objs {
		if err := dryRun(t.Context(), obj); err != nil {
			t.Error(err)
		}
	}
}

// key names obj as namespace/name (name alone when cluster scoped).
func key(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// byKind returns the objects of kind.
func byKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetKind() == kind {
			out = append(out, obj)
		}
	}
	return out
}

// policy returns the single SandboxGPUPolicy rendered, failing the test when there is not exactly one.
func policy(t *testing.T, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	ps := byKind(objs, "SandboxGPUPolicy")
	if len(ps) != 1 {
		t.Fatalf("rendered %d SandboxGPUPolicy objects, want 1", len(ps))
	}
	return ps[0]
}
