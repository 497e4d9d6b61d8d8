package archtest

import (
	"encoding/json"
	"fmt"
	"go/version"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// goModFiles are the repository's modules, relative to the product
// module's root: the product, the test suites, the image builder.
func goModFiles() []string {
	return []string{"go.mod", "test/go.mod", "hack/imagebuild/go.mod"}
}

// goMod is what `go mod edit -json` prints of a go.mod.
type goMod struct {
	Toolchain string
	Require   []struct{ Path, Version string }
	Replace   []struct {
		Old, New struct{ Path, Version string }
	}
}

// k8sRelease matches the versions Kubernetes publishes its staging modules
// (k8s.io/api, client-go, ...) at: v0.<minor>.<patch>, one per release.
// k8s.io/klog, utils and kube-openapi have versions of their own.
var k8sRelease = regexp.MustCompile(`^v0\.[0-9]+\.[0-9]+$`)

// k8sVersions lists, for each k8s.io module of m that follows Kubernetes'
// releases, the version the build uses (its replacement's when replaced),
// as "<version> <path> (<file>)"; k8s.io/kubernetes v1.X.Y counts as v0.X.Y.
func k8sVersions(file string, m goMod) []string {
	replaced := map[string]string{}
	for _, r := range m.Replace {
		if r.New.Version != "" { // a module version, not a folder
			replaced[r.Old.Path] = r.New.Version
		}
	}
	var out []string
	for _, r := range m.Require {
		if !strings.HasPrefix(r.Path, "k8s.io/") {
			continue
		}
		v := r.Version
		if nv, ok := replaced[r.Path]; ok {
			v = nv
		}
		if r.Path == "k8s.io/kubernetes" && strings.HasPrefix(v, "v1.") {
			v = "v0." + strings.TrimPrefix(v, "v1.")
		}
		if !k8sRelease.MatchString(v) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s (%s)", v, r.Path, file))
	}
	return out
}

// k8sDisagreement returns "" when every Kubernetes module of every go.mod
// is at one release, else what disagrees, grouped by version.
func k8sDisagreement(mods map[string]goMod) string {
	byVersion := map[string][]string{}
	for file, m := range mods {
		for _, line := range k8sVersions(file, m) {
			v, rest, _ := strings.Cut(line, " ")
			byVersion[v] = append(byVersion[v], rest)
		}
	}
	if len(byVersion) <= 1 {
		return ""
	}
	var parts []string
	for v, mods := range byVersion {
		slices.Sort(mods)
		parts = append(parts, v+": "+strings.Join(mods, ", "))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// toolchainProblems says what is wrong with the toolchain lines: every
// go.mod names one, all the same, and no newer than the running Go (a
// newer one would make the go command download a toolchain).
func toolchainProblems(mods map[string]goMod, running string) []string {
	var out []string
	seen := map[string][]string{}
	for file, m := range mods {
		if m.Toolchain == "" {
			out = append(out, file+" has no toolchain line")
			continue
		}
		seen[m.Toolchain] = append(seen[m.Toolchain], file)
		if version.Compare(m.Toolchain, running) > 0 {
			out = append(out, fmt.Sprintf("%s wants %s, newer than the running %s: the go command would download it", file, m.Toolchain, running))
		}
	}
	if len(seen) > 1 {
		var parts []string
		for tc, files := range seen {
			slices.Sort(files)
			parts = append(parts, tc+" in "+strings.Join(files, ", "))
		}
		slices.Sort(parts)
		out = append(out, "toolchain lines disagree: "+strings.Join(parts, "; "))
	}
	slices.Sort(out)
	return out
}

func readGoMods(t *testing.T) map[string]goMod {
	t.Helper()
	root := moduleRoot(t)
	mods := map[string]goMod{}
	for _, f := range goModFiles() {
		var m goMod
		out := goTool(t, root, nil, "mod", "edit", "-json", filepath.Join(root, f))
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("go mod edit -json %s: %v", f, err)
		}
		mods[f] = m
	}
	return mods
}

// Every k8s.io module that follows Kubernetes' releases (api, apimachinery,
// client-go, apiextensions-apiserver, kubelet, the test module's staging
// replaces and k8s.io/kubernetes itself) is at one patch release, in every
// go.mod: client-go at another patch than api is a pairing Kubernetes does
// not test.
func TestKubernetesModulesAgree(t *testing.T) {
	mods := readGoMods(t)
	if n := len(k8sVersions("go.mod", mods["go.mod"])); n < 4 {
		t.Fatalf("go.mod: %d Kubernetes modules found, want at least api, apimachinery, client-go, kubelet", n)
	}
	if d := k8sDisagreement(mods); d != "" {
		t.Errorf("Kubernetes modules at more than one release (bump them together): %s", d)
	}
}

// Every go.mod pins the toolchain this repository is built and tested with,
// and the running Go is that one or newer: the go command never downloads
// a toolchain (the Makefile also sets GOTOOLCHAIN=local).
func TestToolchainPinned(t *testing.T) {
	if p := toolchainProblems(readGoMods(t), runtime.Version()); len(p) > 0 {
		t.Errorf("toolchain lines:\n%s", strings.Join(p, "\n"))
	}
}

func TestModuleRulesCatch(t *testing.T) {
	mod := func(toolchain string, req []string, repl ...string) goMod {
		var m goMod
		m.Toolchain = toolchain
		for _, r := range req {
			p, v, _ := strings.Cut(r, "@")
			m.Require = append(m.Require, struct{ Path, Version string }{p, v})
		}
		for _, r := range repl {
			old, nv, _ := strings.Cut(r, "=>")
			var e struct {
				Old, New struct{ Path, Version string }
			}
			e.Old.Path = old
			e.New.Path, e.New.Version, _ = strings.Cut(nv, "@")
			m.Replace = append(m.Replace, e)
		}
		return m
	}
	aligned := mod("go1.26.8", []string{"k8s.io/api@v0.36.3", "k8s.io/client-go@v0.36.3", "k8s.io/klog/v2@v2.140.0",
		"k8s.io/utils@v0.0.0-20260319190234-28399d86e0b5", "sigs.k8s.io/yaml@v1.6.0"})
	for _, c := range []struct {
		name string
		mods map[string]goMod
		want string // in the disagreement; "" for none
	}{
		{"aligned", map[string]goMod{"go.mod": aligned}, ""},
		{"client-go behind", map[string]goMod{"go.mod": mod("", []string{"k8s.io/api@v0.36.3", "k8s.io/client-go@v0.36.0"})},
			"v0.36.0: k8s.io/client-go (go.mod); v0.36.3: k8s.io/api (go.mod)"},
		{"another file", map[string]goMod{"go.mod": aligned, "test/go.mod": mod("", []string{"k8s.io/apiextensions-apiserver@v0.36.2"})},
			"v0.36.2: k8s.io/apiextensions-apiserver (test/go.mod)"},
		{"a replace decides", map[string]goMod{"go.mod": aligned, "test/go.mod": mod("",
			[]string{"k8s.io/kubectl@v0.36.2", "k8s.io/mount-utils@v0.0.0", "k8s.io/kubernetes@v1.36.3"},
			"k8s.io/kubectl=>k8s.io/kubectl@v0.36.3", "k8s.io/mount-utils=>k8s.io/mount-utils@v0.36.3")}, ""},
		{"a replace that disagrees", map[string]goMod{"go.mod": aligned, "test/go.mod": mod("",
			[]string{"k8s.io/kubectl@v0.36.3"}, "k8s.io/kubectl=>k8s.io/kubectl@v0.36.1")}, "v0.36.1: k8s.io/kubectl (test/go.mod)"},
		{"k8s.io/kubernetes behind", map[string]goMod{"go.mod": aligned, "test/go.mod": mod("", []string{"k8s.io/kubernetes@v1.36.2"})},
			"v0.36.2: k8s.io/kubernetes (test/go.mod)"},
	} {
		got := k8sDisagreement(c.mods)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: disagreement %q, want %q", c.name, got, c.want)
		}
	}

	for _, c := range []struct {
		name string
		mods map[string]goMod
		want []string
	}{
		{"pinned", map[string]goMod{"go.mod": aligned, "test/go.mod": mod("go1.26.8", nil)}, nil},
		{"missing", map[string]goMod{"go.mod": aligned, "test/go.mod": mod("", nil)}, []string{"test/go.mod has no toolchain line"}},
		{"newer", map[string]goMod{"go.mod": mod("go1.27.1", nil)},
			[]string{"go.mod wants go1.27.1, newer than the running go1.26.8: the go command would download it"}},
		{"disagree", map[string]goMod{"go.mod": aligned, "hack/imagebuild/go.mod": mod("go1.26.7", nil)},
			[]string{"toolchain lines disagree: go1.26.7 in hack/imagebuild/go.mod; go1.26.8 in go.mod"}},
	} {
		if got := toolchainProblems(c.mods, "go1.26.8"); !slices.Equal(got, c.want) {
			t.Errorf("%s: problems %q, want %q", c.name, got, c.want)
		}
	}
}
