package archtest

import (
	"path"
	"slices"
	"strings"
	"testing"
)

// depGraph is what go list -deps says of one package: every package it
// links, with each one's imports.
type depGraph map[string][]string

// listFormat makes go list print one line per package: its path, then its
// imports.
const listFormat = "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"

func parseDeps(out []byte) depGraph {
	g := depGraph{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) > 0 {
			g[fields[0]] = fields[1:]
		}
	}
	return g
}

// listDeps is the dependency graph of pkg built with CGO_ENABLED=cgo.
func listDeps(t *testing.T, root, pkg, cgo string) depGraph {
	t.Helper()
	return parseDeps(goTool(t, root, []string{"CGO_ENABLED=" + cgo}, "list", "-deps", "-f", listFormat, pkg))
}

// testLibraries are test-only libraries of others; a package below one
// counts too.
func testLibraries() []string {
	return []string{
		"github.com/stretchr/testify", "github.com/onsi/ginkgo", "github.com/onsi/gomega", "go.uber.org/goleak",
		"sigs.k8s.io/controller-runtime/pkg/envtest", "github.com/NVIDIA/go-nvml/pkg/nvml/mock",
	}
}

// forbiddenDep says why a package must not be linked into a shipped
// binary, or "" when it may be.
func forbiddenDep(p string) string {
	under := func(prefix string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }
	switch {
	case under("testing"), p == "net/http/httptest":
		return "the standard library's test support"
	case under(modulePath + "/host/hostsim"):
		return "the simulated kernel"
	case under(modulePath) && (strings.HasSuffix(path.Base(p), "test") || strings.HasSuffix(path.Base(p), "testutil")):
		return "a test helper package of ours"
	case under(kitPath):
		return "the test kit"
	case slices.ContainsFunc(testLibraries(), under):
		return "a test library"
	}
	return ""
}

// chain is the shortest import chain from root to target in g (root and
// target included), or nil when target is not reached.
func (g depGraph) chain(root, target string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == target {
			var out []string
			for ; p != ""; p = prev[p] {
				out = append(out, p)
			}
			slices.Reverse(out)
			return out
		}
		for _, imp := range g[p] {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// depViolation is a forbidden package linked into root.
type depViolation struct {
	pkg, why string
	chain    []string
}

func (v depViolation) String() string {
	through := strings.Join(v.chain, " -> ")
	if len(v.chain) == 0 {
		through = "an unknown chain"
	}
	return v.pkg + " (" + v.why + "), imported through " + through
}

// violations lists the forbidden packages of root's graph, sorted.
func (g depGraph) violations(root string) []depViolation {
	var out []depViolation
	for p := range g {
		if why := forbiddenDep(p); why != "" {
			out = append(out, depViolation{pkg: p, why: why, chain: g.chain(root, p)})
		}
	}
	slices.SortFunc(out, func(a, b depViolation) int { return strings.Compare(a.pkg, b.pkg) })
	return out
}

// Every shipped command, built with cgo or without (make build builds
// nri-gpu-plugin with cgo, the others without; both must hold), links no
// test code.
func TestShippedCommandsLinkNoTestCode(t *testing.T) {
	root := moduleRoot(t)
	out := goTool(t, root, []string{"CGO_ENABLED=1"}, "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "./cmd/...")
	commands := strings.Fields(string(out))
	if len(commands) == 0 {
		t.Fatal("no main package under cmd/: nothing would be checked")
	}
	for _, cmd := range commands {
		for _, cgo := range []string{"0", "1"} {
			t.Run(path.Base(cmd)+"/CGO_ENABLED="+cgo, func(t *testing.T) {
				t.Parallel()
				g := listDeps(t, root, cmd, cgo)
				if _, ok := g[cmd]; !ok {
					t.Fatalf("go list -deps %s does not list the command itself", cmd)
				}
				for _, v := range g.violations(cmd) {
					t.Errorf("shipped command %s (CGO_ENABLED=%s) links %s", path.Base(cmd), cgo, v)
				}
			})
		}
	}
}

func TestForbiddenDep(t *testing.T) {
	for p, bad := range map[string]bool{
		"testing":                                         true,
		"testing/fstest":                                  true,
		"net/http/httptest":                               true,
		modulePath + "/host/hostsim":                      true,
		modulePath + "/vfio/vfiotest":                     true,
		modulePath + "/internal/testutil/kubelettest":     true,
		modulePath + "/nri/nritest":                       true,
		modulePath + "/internal/testutil":                 true,
		"github.com/stretchr/testify/require":             true,
		"sigs.k8s.io/controller-runtime/pkg/envtest":      true,
		"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100": true,
		"internal/synctest":                               false, // the runtime's, not test code
		"testingx":                                        false,
		modulePath + "/host":                              false,
		modulePath + "/internal/shell":                    false,
		modulePath + "/nri/gpucdi":                        false,
		"k8s.io/client-go/tools/clientcmd/api/latest":     false, // not ours: its name means newest
		"github.com/stretchr/testifyish":                  false,
	} {
		if got := forbiddenDep(p) != ""; got != bad {
			t.Errorf("forbiddenDep(%q) = %q, want forbidden=%v", p, forbiddenDep(p), bad)
		}
	}
}

// The check fails on a graph that links test code, and names the chain.
func TestDepViolationsNameTheChain(t *testing.T) {
	cmd := modulePath + "/cmd/x"
	hostsim := modulePath + "/host/hostsim"
	g := depGraph{
		cmd:                          {"fmt", modulePath + "/a", modulePath + "/b"},
		modulePath + "/a":            {modulePath + "/b", hostsim},
		modulePath + "/b":            {"fmt"},
		hostsim:                      {"os", "testing"},
		"testing":                    {"fmt"},
		"fmt":                        nil,
		"os":                         nil,
		modulePath + "/unreached":    nil,
		modulePath + "/c/ctestutil":  nil,
		modulePath + "/b/flagtester": nil,
	}
	var got []string
	for _, v := range g.violations(cmd) {
		got = append(got, v.String())
	}
	want := []string{
		modulePath + "/c/ctestutil (a test helper package of ours), imported through an unknown chain",
		hostsim + " (the simulated kernel), imported through " + cmd + " -> " + modulePath + "/a -> " + hostsim,
		"testing (the standard library's test support), imported through " + cmd + " -> " + modulePath + "/a -> " + hostsim + " -> testing",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	clean := depGraph{cmd: {"fmt"}, "fmt": nil}
	if v := clean.violations(cmd); len(v) != 0 {
		t.Errorf("a clean graph has violations: %v", v)
	}
}

// The real go list of a test helper package fails the check: parsing and
// listing work on the tool's actual output.
func TestDepsCheckCatchesATestHelperPackage(t *testing.T) {
	pkg := modulePath + "/internal/testutil"
	g := listDeps(t, moduleRoot(t), pkg, "0")
	var found []string
	for _, v := range g.violations(pkg) {
		found = append(found, v.String())
	}
	want := []string{
		pkg + " (a test helper package of ours), imported through " + pkg,
		"testing (the standard library's test support), imported through " + pkg + " -> testing",
	}
	for _, w := range want {
		if !slices.Contains(found, w) {
			t.Errorf("violations of %s lack %q; got:\n%s", pkg, w, strings.Join(found, "\n"))
		}
	}
}
