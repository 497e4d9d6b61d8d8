package archtest

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// No test knob in anything a user installs: a knob for tests is a knob a
// user can set, and one a reviewer must reason about. The chart's values
// have no `testing` key (at any depth), and no product Go file (its flag
// help included), chart template or manifest says "for tests only" (any
// case). The cluster suite reaches its simulated host from the test
// module instead (test/internal/simnode.OntoHost, applied to the operand
// pods by a mutating webhook of the test process).

// forTestsOnly is the phrase, in any case, its words apart by spaces,
// underscores or dashes.
var forTestsOnly = regexp.MustCompile(`(?i)\bfor[\s_-]+tests?[\s_-]+only\b`)

// valuesTestingKeys are the paths of the keys named testing (any case) in
// a chart's values file.
func valuesTestingKeys(data []byte) ([]string, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(x)) {
				if strings.EqualFold(k, "testing") {
					out = append(out, prefix+k)
				}
				walk(prefix+k+".", x[k])
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s%d.", prefix, i), e)
			}
		}
	}
	walk("", v)
	return out, nil
}

// phraseLines are the lines (from 1) of text that say "for tests only".
func phraseLines(text string) []int {
	var out []int
	for i, line := range strings.Split(text, "\n") {
		if forTestsOnly.MatchString(line) {
			out = append(out, i+1)
		}
	}
	return out
}

// checkKnobs looks at what a user installs or runs, under the module
// root: every file under manifests/ (the chart, its values and templates,
// the kustomize manifests) and the product's non-test Go files (skipDir:
// not test/, hack/, test helper packages or other modules). It returns one
// line per violation: the file (slash, from root), the line or key, why.
func checkKnobs(root string) ([]string, error) {
	var out []string
	tree := os.DirFS(root)
	err := fs.WalkDir(tree, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		manifest := rel == "manifests" || strings.HasPrefix(rel, "manifests/")
		goFile := strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")
		switch {
		case d.IsDir() && !manifest && skipDir(rel, filepath.Join(root, filepath.FromSlash(rel))):
			return fs.SkipDir
		case d.IsDir() || !manifest && !goFile:
			return nil
		}
		data, err := fs.ReadFile(tree, rel)
		if err != nil {
			return fmt.Errorf("read %s: %w", rel, err)
		}
		for _, n := range phraseLines(string(data)) {
			out = append(out, fmt.Sprintf("%s:%d: says \"for tests only\": a test knob in what a user installs", rel, n))
		}
		if base := filepath.Base(rel); manifest && strings.HasPrefix(base, "values") && (strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")) {
			keys, err := valuesTestingKeys(data)
			if err != nil {
				return fmt.Errorf("values file %s: %w", rel, err)
			}
			for _, k := range keys {
				out = append(out, fmt.Sprintf("%s: key %s: a testing value in the chart a user installs", rel, k))
			}
		}
		return nil
	})
	return out, err
}

// Nothing a user installs has a test knob.
func TestNoTestKnobs(t *testing.T) {
	root := moduleRoot(t)
	found, err := checkKnobs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
	// The walk reached what it guards.
	if _, err := os.Stat(filepath.Join(root, "manifests", "helm", "sandbox-gpu", "values.yaml")); err != nil {
		t.Fatalf("the chart's values: %v", err)
	}
}

// Each knob rule fires on what it is meant for, and not on look-alikes or
// on what no user installs.
func TestKnobRulesCatch(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"the chart's testing value, as it was",
			map[string]string{"manifests/helm/c/values.yaml": "operator:\n  namespace: x\n# never set this\ntesting:\n  hostRoot: \"\"\n"},
			[]string{"manifests/helm/c/values.yaml: key testing"}},
		{"a testing key deeper, in any case, in another values file",
			map[string]string{"manifests/helm/c/values-dev.yaml": "operator:\n  Testing: {a: 1}\nlist:\n- testing: true\n"},
			[]string{"manifests/helm/c/values-dev.yaml: key list.0.testing", "manifests/helm/c/values-dev.yaml: key operator.Testing"}},
		{"look-alike keys and a testing word in a value",
			map[string]string{"manifests/helm/c/values.yaml": "testingMode: false\ntests: {}\nnote: testing is done elsewhere\n"},
			nil},
		{"a flag's help, as the operator's --operand-host-root had it",
			map[string]string{"cmd/op/main.go": "package main\n\nfunc f() {\n\tfs.Func(\"operand-host-root\", \"FOR TESTS ONLY: operands read DIR\", nil)\n}\n"},
			[]string{"cmd/op/main.go:4: says"}},
		{"a comment in product code and in a template, any spacing",
			map[string]string{
				"operator/x.go":                      "package x\n\n// HostRoot is for tests only.\nvar HostRoot string\n",
				"manifests/helm/c/templates/op.yaml": "args:\n# For_Test-Only\n- --x\n",
				"manifests/operator/operator.yaml":   "# (and, for   tests   only, a folder)\n",
			},
			[]string{"manifests/helm/c/templates/op.yaml:2: says", "manifests/operator/operator.yaml:1: says", "operator/x.go:3: says"}},
		{"look-alike phrases",
			map[string]string{"operator/x.go": "package x\n\n// used for tests, only when set; for testsonly; fortests only\n"},
			nil},
		{"what no user installs: tests, test helpers, the test module, hack",
			map[string]string{
				"operator/x_test.go":       "package x\n\n// for tests only\n",
				"internal/fooztest/f.go":   "package fooztest\n\n// for tests only\n",
				"test/cluster/a.go":        "package cluster\n\n// for tests only\n",
				"hack/tool/main.go":        "package main\n\n// for tests only\n",
				"docs/notes.md":            "for tests only\n",
				"test/helm/values.yaml":    "testing: {}\n",
				"internal/x/testdata/a.go": "package a\n\n// for tests only\n",
			},
			nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for name, body := range c.files {
				p := filepath.Join(root, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			found, err := checkKnobs(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(found) != len(c.want) {
				t.Fatalf("findings %q, want %d: %q", found, len(c.want), c.want)
			}
			slices.Sort(found)
			for i, w := range c.want {
				if !strings.HasPrefix(found[i], w) {
					t.Errorf("finding %q, want one starting %q", found[i], w)
				}
			}
		})
	}
	if _, err := valuesTestingKeys([]byte("a: [")); err == nil {
		t.Error("a broken values file is an error, not a pass")
	}
}
