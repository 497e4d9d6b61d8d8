package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The rules of the host door. The check is syntactic (go/parser, imports
// resolved per file by name, no type checking): *host.Host is the only type with
// methods SysfsRoot, DevRoot and ProcRoot, and internal/shell's Roots the
// only value with fields Sysfs, Dev and Proc under a selector Roots.
const (
	// ruleRootAccessor: x.SysfsRoot(), x.DevRoot(), x.ProcRoot() outside
	// package host: a caller about to read under the host model's roots.
	ruleRootAccessor = "root-accessor"
	// ruleShellRoots: x.Roots.Sysfs, .Dev, .Proc anywhere: commands take
	// host.Options from internal/hostroots (hostroots.Options(env.Roots),
	// the flags' roots with the host model's defaults), never the flags
	// themselves.
	ruleShellRoots = "shell-roots"
	// ruleGlob: filepath.Glob or fs.Glob: sysfs is read by name through
	// the host model, not by pattern.
	ruleGlob = "glob"
	// ruleHostPathLiteral: a string literal "/sys", "/proc", "/lib/modules"
	// or one under them, anywhere: a hard-coded host path that no injected
	// root can move. /lib/modules is the node's kernel modules: package
	// host reads it under --modules-root (host.DefaultModulesRoot) and loads
	// modules from it, so no other code names it.
	ruleHostPathLiteral = "host-path-literal"
	// ruleDevRead: a file-system call (os, syscall, unix, ioutil,
	// filepath.EvalSymlinks/Walk/WalkDir) given "/dev" or a path under it
	// as a literal: a read of the process's own /dev instead of the dev
	// root. ("/dev/nvidia0" as a container path in a spec is no read.)
	ruleDevRead = "dev-read"
)

// finding is one place that breaks a rule.
type finding struct {
	rule   string
	file   string // slash path from the module root
	line   int
	detail string
}

func (f finding) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", f.file, f.line, f.rule, f.detail)
}

// fsPackages are the import paths whose every function touches the file
// system or the kernel, and filepath's functions that do.
func fsPackages() []string {
	return []string{"os", "syscall", "golang.org/x/sys/unix", "io/ioutil"}
}

func filepathReads() []string { return []string{"EvalSymlinks", "Walk", "WalkDir", "Glob"} }

// checkFile applies every rule to one parsed file.
func checkFile(fset *token.FileSet, rel string, f *ast.File) []finding {
	imports := map[string]string{} // local name -> import path
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imports[name] = p
	}
	// pkgFunc is the import path and name of a call of a package's
	// function (filepath.Glob), or "" when fun is not one.
	pkgFunc := func(fun ast.Expr) (string, string) {
		sel, ok := fun.(*ast.SelectorExpr)
		if !ok {
			return "", ""
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return "", ""
		}
		return imports[id.Name], sel.Sel.Name
	}
	var out []finding
	add := func(n ast.Node, rule, detail string) {
		out = append(out, finding{rule: rule, file: rel, line: fset.Position(n.Pos()).Line, detail: detail})
	}
	tags := map[*ast.BasicLit]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			if n.Tag != nil {
				tags[n.Tag] = true
			}
		case *ast.CallExpr:
			pkg, name := pkgFunc(n.Fun)
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && len(n.Args) == 0 &&
				slices.Contains([]string{"SysfsRoot", "DevRoot", "ProcRoot"}, sel.Sel.Name) {
				add(n, ruleRootAccessor, "calls "+sel.Sel.Name+"() of the host model")
			}
			if name == "Glob" && (pkg == "path/filepath" || pkg == "io/fs") {
				add(n, ruleGlob, "calls "+pkg+".Glob")
			}
			if slices.Contains(fsPackages(), pkg) || pkg == "path/filepath" && slices.Contains(filepathReads(), name) {
				for _, arg := range n.Args {
					if lit := devLiteral(arg); lit != "" {
						add(n, ruleDevRead, fmt.Sprintf("%s.%s is given %s", pkg, name, lit))
					}
				}
			}
		case *ast.SelectorExpr:
			if inner, ok := n.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "Roots" &&
				slices.Contains([]string{"Sysfs", "Dev", "Proc"}, n.Sel.Name) {
				add(n, ruleShellRoots, "reads the shell's Roots."+n.Sel.Name)
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING && !tags[n] {
				if s, err := strconv.Unquote(n.Value); err == nil && isHostPath(s, "/sys", "/proc", "/lib/modules") {
					add(n, ruleHostPathLiteral, "names "+strconv.Quote(s))
				}
			}
		}
		return true
	})
	return out
}

// isHostPath says whether s is one of the roots or a path under one.
func isHostPath(s string, roots ...string) bool {
	for _, r := range roots {
		if s == r || strings.HasPrefix(s, r+"/") {
			return true
		}
	}
	return false
}

// devLiteral is the first "/dev" literal within expr (a function literal's
// body aside), quoted, or "".
func devLiteral(expr ast.Expr) string {
	found := ""
	ast.Inspect(expr, func(n ast.Node) bool {
		if found != "" {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.BasicLit:
			if s, err := strconv.Unquote(n.Value); n.Kind == token.STRING && err == nil && isHostPath(s, "/dev") {
				found = strconv.Quote(s)
			}
		}
		return true
	})
	return found
}

// skipDir says whether a folder (slash path from the module root) is no
// product code of this module to check: package host itself (the one
// door, hostsim included), separate modules and tools (test/, hack/ and
// any folder with its own go.mod), the test kit and test helper packages
// (*test, *testutil), and data, vendored and hidden folders.
func skipDir(rel, abs string) bool {
	base := filepath.Base(rel)
	switch {
	case rel == ".":
		return false
	case slices.Contains([]string{"host", "test", "hack", strings.TrimPrefix(kitPath, modulePath+"/")}, rel):
		return true
	case strings.HasSuffix(base, "test") || strings.HasSuffix(base, "testutil"):
		return true
	case base == "testdata" || base == "vendor" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_"):
		return true
	}
	_, err := os.Stat(filepath.Join(abs, "go.mod"))
	return err == nil
}

// checkTree parses every non-test Go file of the product code under root
// and applies the rules.
func checkTree(root string) ([]finding, error) { return checkFiles(root, nil, checkFile) }

// walkGoFiles calls visit with each Go file under root (its slash path from
// root, and its path), leaving out the folders skip says (slash path from
// root, and path).
func walkGoFiles(root string, skip func(rel, abs string) bool, visit func(rel, abs string) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return fmt.Errorf("file %s: %w", p, err)
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if skip(rel, p) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		return visit(rel, p)
	})
}

// checkFiles parses the product files under root that keep accepts (nil:
// every one) and applies check to each.
func checkFiles(root string, keep func(rel string) bool, check func(*token.FileSet, string, *ast.File) []finding) ([]finding, error) {
	var out []finding
	err := eachProductFile(root, func(fset *token.FileSet, rel string, f *ast.File) {
		if keep == nil || keep(rel) {
			out = append(out, check(fset, rel, f)...)
		}
	})
	return out, err
}

// allowed is a place where a rule does not apply, and why.
type allowed struct {
	rule, path, reason string // path: a file or folder, slash, from the module root
}

func (a allowed) covers(f finding) bool {
	return a.rule == f.rule && (f.file == a.path || strings.HasPrefix(f.file, a.path+"/"))
}

// allowList is every exception to the rules. An entry that covers nothing
// fails the test, so that none outlives its reason.
func allowList() []allowed {
	return []allowed{
		{ruleHostPathLiteral, "operator/operands",
			"the operand DaemonSets' hostPath volumes (/sys, /proc, the node's /lib/modules read-only): a pod spec the kubelet mounts, not a read by the operator"},
		{ruleGlob, "kata/cdi.go",
			"lists its own spec files in --cdi-dir, a CDI folder and no host root"},
	}
}

// applyAllowList splits findings into violations and the allow-list
// entries that covered none.
func applyAllowList(findings []finding, allow []allowed) (violations []finding, stale []allowed) {
	used := make([]bool, len(allow))
	for _, f := range findings {
		i := slices.IndexFunc(allow, func(a allowed) bool { return a.covers(f) })
		if i < 0 {
			violations = append(violations, f)
			continue
		}
		used[i] = true
	}
	for i, a := range allow {
		if !used[i] {
			stale = append(stale, a)
		}
	}
	return violations, stale
}

// Only package host reads sysfs, /dev and /proc: the rest of the product
// module breaks no rule of the host door outside the allow-list.
func TestHostDoor(t *testing.T) {
	findings, err := checkTree(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	violations, stale := applyAllowList(findings, allowList())
	for _, f := range findings {
		if !slices.Contains(violations, f) {
			t.Logf("allowed: %s", f)
		}
	}
	for _, v := range violations {
		t.Errorf("%s: read sysfs, /dev and /proc through package host (a method of *host.Host over injected roots)", v)
	}
	for _, a := range stale {
		t.Errorf("allow-list entry %s %s covers nothing: remove it", a.rule, a.path)
	}
}
