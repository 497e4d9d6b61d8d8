package archtest

import (
	"go/ast"
	"go/token"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ruleHostType: product code outside the program wiring names the host
// model's concrete type (*host.Host, host.Host) in a type, field,
// parameter or result. A consumer declares the narrow interface of the
// methods it calls (its hostview.go, as nri/gpucdi's hostDevices) and
// takes that; the wiring, which builds the one *host.Host, passes it. The
// check is syntactic, as the host door's: a selector Host on the local name
// of an import of package host.
const ruleHostType = "host-type"

// hostPackage is package host's import path.
const hostPackage = modulePath + "/host"

// isHostWiring says whether a file (slash path from the module root) is
// program wiring, which builds the host model and hands it to consumers:
// the mains (cmd/), a cli package of a part (vfio/cli, nri/cli, ...), the
// device plugins' common command
// (internal/plugincmd) and the demo's program (demo/).
func isHostWiring(rel string) bool {
	dir := path.Dir(rel)
	segments := strings.Split(dir, "/")
	switch {
	case segments[0] == "cmd", segments[0] == "demo":
		return true
	case dir == "internal/plugincmd":
		return true
	case slices.Contains(segments, "cli"):
		return true
	}
	return false
}

// hostTypeFindings is every place a file names package host's Host type.
func hostTypeFindings(fset *token.FileSet, rel string, f *ast.File) []finding {
	var names []string // local names of package host in this file
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == hostPackage {
			name := "host"
			if imp.Name != nil {
				name = imp.Name.Name
			}
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	var out []finding
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Host" {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && slices.Contains(names, id.Name) {
			out = append(out, finding{rule: ruleHostType, file: rel, line: fset.Position(sel.Pos()).Line,
				detail: "names " + id.Name + ".Host"})
		}
		return true
	})
	return out
}

// checkHostViews reports where the product code under root, outside the
// program wiring, names host.Host.
func checkHostViews(root string) ([]finding, error) {
	return checkFiles(root, func(rel string) bool { return !isHostWiring(rel) }, hostTypeFindings)
}

// Each consumer of the host model declares the narrow interface it uses:
// outside the program wiring, no product code names *host.Host.
func TestConsumersDeclareTheirHostView(t *testing.T) {
	findings, err := checkHostViews(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Errorf("%s: take an interface of the host methods this package calls (its hostview.go), not the host model's concrete type; the program wiring passes *host.Host", f)
	}
}

// The rule fires on every way of naming the type, and not on look-alikes.
func TestHostTypeRule(t *testing.T) {
	for _, c := range []struct {
		name    string
		imports string
		body    string
		want    []string
	}{
		{"a field, as vfio's Planner had it", `"github.com/sandbox-gpu/sandbox-gpu/host"`,
			"type P struct {\n\tHost *host.Host\n}", []string{"host-type:2"}},
		{"a parameter and a result, as vgpu's Apply and gpucdi's hostModel had them", `"github.com/sandbox-gpu/sandbox-gpu/host"`,
			"func f(h *host.Host) {}\n\nfunc g() *host.Host { return nil }", []string{"host-type:1", "host-type:3"}},
		{"a function type's parameter, a slice, a value, an alias, an embedded field", `"github.com/sandbox-gpu/sandbox-gpu/host"`,
			"type R func(h *host.Host) error\n\nvar hs []*host.Host\n\nvar v host.Host\n\ntype A = host.Host\n\ntype E struct {\n\t*host.Host\n}",
			[]string{"host-type:1", "host-type:3", "host-type:5", "host-type:7", "host-type:10"}},
		{"under another local name", `hm "github.com/sandbox-gpu/sandbox-gpu/host"`,
			"func f(h *hm.Host) {}", []string{"host-type:1"}},
		{"the data types, the constructor and a field named Host", `"github.com/sandbox-gpu/sandbox-gpu/host"`,
			"type P struct {\n\tHost HostView\n\tF    *host.Function\n}\n\nfunc f(p P, a host.Address) { _ = host.New(host.Options{}); _, _ = p.Host.Scan() }",
			nil},
		{"a Host of another package", `"example.com/other/host"`,
			"func f(h *host.Host) {}", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := syntheticFindings(t, "package x\n\nimport (\n\t"+c.imports+"\n)\n\n", c.body, hostTypeFindings)
			if !slices.Equal(got, c.want) {
				t.Errorf("findings %v, want %v in\n%s", got, c.want, c.body)
			}
		})
	}
}

// The wiring is the mains, cli packages, plugincmd and
// the demo; a consumer in the same part is not.
func TestHostWiring(t *testing.T) {
	for rel, want := range map[string]bool{
		"cmd/sandbox-gpu-validator/main.go": true,
		"vfio/cli/cli.go":                   true,
		"nri/cli/run.go":                    true,
		"kata/program.go":                   false, // programs live in cli packages now
		"internal/plugincmd/plugincmd.go":   true,
		"demo/simulate.go":                  true,
		"vfio/plan.go":                      false,
		"kata/scanner.go":                   false,
		"vgpu/clip/x.go":                    false,
		"internal/plugincmdx/x.go":          false,
		"nri/gpucdi/nodes.go":               false,
		"discovery/cmd.go":                  false,
	} {
		if got := isHostWiring(rel); got != want {
			t.Errorf("isHostWiring(%s) = %v, want %v", rel, got, want)
		}
	}
}

// The tree walk finds a planted field in a consumer and skips the wiring,
// tests, package host and test helpers.
func TestCheckHostViewsTree(t *testing.T) {
	root := t.TempDir()
	bad := "package x\n\nimport \"github.com/sandbox-gpu/sandbox-gpu/host\"\n\ntype P struct{ H *host.Host }\n"
	write := func(rel, content string) { t.Helper(); writeTreeFile(t, root, rel, content) }
	write("go.mod", "module "+modulePath+"\n")
	for _, rel := range []string{
		"vfio/plan.go", "kubevirt/scanner.go", "vfio/cli/cli.go", "cmd/x/main.go", "kata/program.go", "vfio/plan_test.go",
		"host/hostsim/sim.go", "internal/agenttest/a.go", "vfio/vfiotest/v.go",
	} {
		write(rel, bad)
	}
	write("vgpu/other.go", "package x\n\nimport \"example.com/host\"\n\ntype P struct{ H *host.Host }\n")
	got, err := checkHostViews(root)
	if err != nil {
		t.Fatal(err)
	}
	if files, want := findingFiles(got), []string{"kata/program.go", "kubevirt/scanner.go", "vfio/plan.go"}; !slices.Equal(files, want) {
		t.Errorf("files with findings %v, want %v", files, want)
	}
}
