package controllers

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// policyYAML is a policy named default with spec.
func policyYAML(spec string) string {
	return "apiVersion: sandbox-gpu.io/v1alpha1\nkind: SandboxGPUPolicy\nmetadata: {name: default}\nspec: " + spec + "\n"
}

// dryRunPolicy creates the policy with a server-side dry run: defaulting,
// schema and CEL rules run, nothing is stored. Where another test left the
// one policy (it must be named default), the same object is a dry-run
// update of it instead, which runs the same rules.
func dryRunPolicy(t *testing.T, c client.Client, y string) (*unstructured.Unstructured, error) {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(y), 512).Decode(&u.Object))
	return u, dryRunObject(t, c, u)
}

// dryRunObject is dryRunPolicy's dry run of a decoded policy u.
func dryRunObject(t *testing.T, c client.Client, u *unstructured.Unstructured) error {
	t.Helper()
	err := c.Create(context.Background(), u.DeepCopy(), client.DryRunAll)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	var old v1alpha1.SandboxGPUPolicy
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: u.GetName()}, &old))
	u.SetResourceVersion(old.ResourceVersion)
	return c.Update(context.Background(), u, client.DryRunAll)
}

// A policy that cannot be stored wrong: every invalid field is refused by
// the real API server with a message that names it, and what is valid
// (including the shipped sample) is still stored.
func TestPolicyRejectsInvalidFields(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	const (
		duration = "drain.timeout must be a non-negative Go duration such as 10m, 90s or 1h30m"
		vendor   = "vfioManager.vendor must be NVIDIA's 10de: another vendor needs vfioManager.allowOtherVendors: true"
		classes  = "vfioManager.pciClasses is required when vfioManager.vendor is not NVIDIA's 10de"
	)
	for _, tc := range []struct{ what, spec, want string }{
		{"a timeout that is no duration", "{drain: {timeout: banana}}", duration},
		{"a negative timeout", "{drain: {timeout: -5m}}", duration},
		{"a timeout with a sign", "{drain: {timeout: +5m}}", duration},
		{"a timeout without a unit", "{drain: {timeout: '10'}}", duration},
		{"an empty timeout", "{drain: {timeout: ''}}", duration},
		{"a timeout beyond Go's durations", "{drain: {timeout: 9999999999h}}", "drain.timeout"},
		{"a timeout too long to be one", "{drain: {timeout: 1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h1h}}", "spec.drain.timeout: Too long"},
		{"another vendor", "{vfioManager: {vendor: '8086'}}", vendor},
		{"another vendor with a class filter but no opt-in", "{vfioManager: {vendor: '8086', pciClasses: ['0302']}}", vendor},
		{"another vendor opted in without a class filter", "{vfioManager: {vendor: '1002', allowOtherVendors: true}}", classes},
		{"another vendor opted in with an empty class filter", "{vfioManager: {vendor: '1002', allowOtherVendors: true, pciClasses: []}}", classes},
		{"a class that is no hex", "{vfioManager: {pciClasses: ['03zz']}}", "spec.vfioManager.pciClasses[0]: Invalid value"},
		{"a class of odd length", "{vfioManager: {pciClasses: ['030']}}", "spec.vfioManager.pciClasses[0]: Invalid value"},
		{"a class too long", "{vfioManager: {pciClasses: ['03000000']}}", "spec.vfioManager.pciClasses[0]: Invalid value"},
		{"a vendor that is no hex", "{vfioManager: {vendor: 'nvidia'}}", "spec.vfioManager.vendor: Invalid value"},
		{"unknown NRI hooks", "{nriPlugin: {cdiHooks: all}}", `spec.nriPlugin.cdiHooks: Unsupported value: "all": supported values: "nvidia", "none", "any"`},
	} {
		_, err := dryRunPolicy(t, c, policyYAML(tc.spec))
		if assert.Error(t, err, tc.what) {
			assert.Contains(t, err.Error(), tc.want, tc.what)
		}
	}

	for _, tc := range []struct{ what, spec string }{
		{"the defaults", "{}"},
		{"minutes", "{drain: {timeout: 10m}}"},
		{"a compound duration", "{drain: {timeout: 1h30m}}"},
		{"a fraction", "{drain: {timeout: 1.5h}}"},
		{"zero", "{drain: {timeout: '0'}}"},
		{"zero seconds", "{drain: {timeout: 0s}}"},
		{"milliseconds", "{drain: {timeout: 500ms}}"},
		{"NVIDIA spelled 0x10DE", "{vfioManager: {vendor: '0x10DE'}}"},
		{"NVIDIA with a class filter", "{vfioManager: {vendor: '10de', pciClasses: ['0302', '03']}}"},
		{"another vendor opted in with classes", "{vfioManager: {vendor: '1002', allowOtherVendors: true, pciClasses: ['0300']}}"},
		{"NRI hooks none", "{nriPlugin: {cdiHooks: none}}"},
		{"NRI hooks any", "{nriPlugin: {cdiHooks: any}}"},
	} {
		_, err := dryRunPolicy(t, c, policyYAML(tc.spec))
		assert.NoError(t, err, tc.what)
	}

	// Defaults (within a given object): NVIDIA, hooks nvidia, 10m.
	u, err := dryRunPolicy(t, c, policyYAML("{vfioManager: {}, nriPlugin: {}, drain: {}}"))
	require.NoError(t, err)
	for path, want := range map[string]string{"vfioManager.vendor": "10de", "nriPlugin.cdiHooks": "nvidia", "drain.timeout": "10m"} {
		got, _, _ := unstructured.NestedString(u.Object, append([]string{"spec"}, strings.Split(path, ".")...)...)
		assert.Equal(t, want, got, path)
	}

	// The shipped sample still passes.
	for _, o := range readManifests(t, "samples/policy.yaml") {
		assert.NoError(t, dryRunObject(t, c, o), "the sample %s", o.GetName())
	}
}
