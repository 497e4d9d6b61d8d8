package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The rules of programs (issue 20): one home per program, no simulated
// host in the product.
//
//   - ruleOneLineMain: every cmd/<name>/ main package is one file, main.go,
//     whose only declaration is func main() { os.Exit(shell.Main(cli.Program())) }
//     with the part's cli package imported as cli: the program lives in
//     that package, never in main.
//   - ruleSimulated: no product code declares or calls a method or field
//     named Simulated, and internal/shell declares nothing named sim* or
//     simulat* (its old IO.Host/Env.sim option): programs run on a
//     simulated tree through their root flags like on a node.
//   - internal/shell links no package host, nor does the operator
//     (TestShellLinksNoHost): a program's host model comes from
//     internal/hostroots, so a program without host roots links none.
const (
	ruleOneLineMain = "one-line-main"
	ruleSimulated   = "simulated-host"
)

// mainImports are the imports a main may have besides its part's cli.
func mainImports() []string { return []string{"os", modulePath + "/internal/shell"} }

// checkMain applies ruleOneLineMain to one command's main.go.
func checkMain(fset *token.FileSet, rel string, f *ast.File) []finding {
	var out []finding
	add := func(n ast.Node, detail string) {
		out = append(out, finding{rule: ruleOneLineMain, file: rel, line: fset.Position(n.Pos()).Line, detail: detail})
	}
	cli := ""
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		switch {
		case slices.Contains(mainImports(), p) && imp.Name == nil:
		case strings.HasPrefix(p, modulePath+"/") && strings.HasSuffix(p, "/cli") && imp.Name == nil && cli == "":
			cli = p
		default:
			add(imp, "imports "+strconv.Quote(p)+" (a main imports only os, internal/shell and its part's cli package)")
		}
	}
	if cli == "" {
		add(f.Name, "imports no cli package of a part")
	}
	var mains int
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			continue
		}
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "main" || fd.Recv != nil {
			add(d, "declares more than func main (the program belongs in its part's cli package)")
			continue
		}
		mains++
		if !isOneLineMain(fd) {
			add(fd, "func main is not os.Exit(shell.Main(cli.Program()))")
		}
	}
	if mains == 0 {
		add(f.Name, "has no func main")
	}
	return out
}

// isOneLineMain says whether fd is func main() { os.Exit(shell.Main(cli.Program())) }.
func isOneLineMain(fd *ast.FuncDecl) bool {
	if fd.Type.Params.NumFields() != 0 || fd.Type.Results != nil || fd.Body == nil || len(fd.Body.List) != 1 {
		return false
	}
	stmt, ok := fd.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call := func(e ast.Expr, pkg, name string) (*ast.CallExpr, bool) {
		c, ok := e.(*ast.CallExpr)
		if !ok {
			return nil, false
		}
		sel, ok := c.Fun.(*ast.SelectorExpr)
		if !ok {
			return nil, false
		}
		id, ok := sel.X.(*ast.Ident)
		return c, ok && id.Name == pkg && sel.Sel.Name == name
	}
	exit, ok := call(stmt.X, "os", "Exit")
	if !ok || len(exit.Args) != 1 {
		return false
	}
	m, ok := call(exit.Args[0], "shell", "Main")
	if !ok || len(m.Args) != 1 {
		return false
	}
	p, ok := call(m.Args[0], "cli", "Program")
	return ok && len(p.Args) == 0
}

// checkSimulated applies ruleSimulated to one product file; shell says
// whether it is a file of internal/shell.
func checkSimulated(fset *token.FileSet, rel string, f *ast.File, shell bool) []finding {
	var out []finding
	add := func(n ast.Node, detail string) {
		out = append(out, finding{rule: ruleSimulated, file: rel, line: fset.Position(n.Pos()).Line, detail: detail})
	}
	// simName: sim or Sim as a word of the name (sim, simHost, SimRoot),
	// or simulat anywhere (Simulated, simulator).
	simName := func(name string) bool {
		l := strings.ToLower(name)
		if strings.Contains(l, "simulat") {
			return true
		}
		if !strings.HasPrefix(l, "sim") {
			return false
		}
		rest := name[3:]
		return rest == "" || !unicode.IsLower(rune(rest[0]))
	}
	declared := func(id *ast.Ident) {
		switch {
		case id.Name == "Simulated":
			add(id, "declares Simulated")
		case shell && simName(id.Name):
			add(id, "internal/shell declares "+id.Name+" (a simulated-host option)")
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			declared(n.Name)
		case *ast.Field:
			for _, id := range n.Names {
				declared(id)
			}
		case *ast.TypeSpec:
			declared(n.Name)
		case *ast.ValueSpec:
			for _, id := range n.Names {
				declared(id)
			}
		case *ast.SelectorExpr:
			if n.Sel.Name == "Simulated" {
				add(n, "uses Simulated")
			}
		}
		return true
	})
	return out
}

// checkPrograms applies the program rules to the product code under root:
// every cmd/<name>/ folder, and every non-test Go file (skipDir's folders
// aside) for ruleSimulated.
func checkPrograms(root string) ([]finding, error) {
	fset := token.NewFileSet()
	var out []finding
	cmds, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return nil, fmt.Errorf("commands: %w", err)
	}
	for _, d := range cmds {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(root, "cmd", d.Name())
		files, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("command %s: %w", d.Name(), err)
		}
		for _, e := range files {
			name := e.Name()
			rel := "cmd/" + d.Name() + "/" + name
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			if name != "main.go" {
				out = append(out, finding{rule: ruleOneLineMain, file: rel, line: 1, detail: "a command's only file is main.go (the program belongs in its part's cli package)"})
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, fmt.Errorf("parse %s: %w", rel, err)
			}
			out = append(out, checkMain(fset, rel, f)...)
		}
	}
	err = eachProductFile(root, func(fset *token.FileSet, rel string, f *ast.File) {
		out = append(out, checkSimulated(fset, rel, f, path.Dir(rel) == "internal/shell")...)
	})
	return out, err
}

// Every command is a one-line main, and no product code has a simulated
// host option.
func TestPrograms(t *testing.T) {
	findings, err := checkPrograms(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Errorf("%s", f)
	}
}

// internal/shell links no package host, nor does the operator, which
// takes no host roots: go list -deps of each holds none.
func TestShellLinksNoHost(t *testing.T) {
	root := moduleRoot(t)
	for _, pkg := range []string{"internal/shell", "cmd/sandbox-gpu-operator"} {
		full := modulePath + "/" + pkg
		g := listDeps(t, root, "./"+pkg, "0")
		if _, ok := g[full]; !ok {
			t.Fatalf("go list -deps ./%s does not list %s", pkg, full)
		}
		if c := hostChain(g, full); c != nil {
			t.Errorf("%s links the host model: %s (programs build host.Options with internal/hostroots)", pkg, strings.Join(c, " -> "))
		}
	}
}

// hostChain is the import chain from root to package host or one below it,
// or nil.
func hostChain(g depGraph, root string) []string {
	var hosts []string
	for p := range g {
		if p == modulePath+"/host" || strings.HasPrefix(p, modulePath+"/host/") {
			hosts = append(hosts, p)
		}
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		if c := g.chain(root, h); c != nil {
			return c
		}
	}
	return nil
}
