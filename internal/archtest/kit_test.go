package archtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// kitPath is the test kit: the harnesses more than one part uses (agents on
// simulated hosts, the process runner, the stand-in kubelet, envtest, what
// the end-to-end suites share), for the product module's tests, the demo
// and the test/ module.
const kitPath = modulePath + "/internal/testutil"

// listedPackage is what go list -json says of one package.
type listedPackage struct {
	ImportPath   string
	Name         string
	GoFiles      []string // non-test Go files (for this platform)
	Imports      []string // of GoFiles
	TestImports  []string
	XTestImports []string
}

// parsePackages reads go list -json's stream of packages.
func parsePackages(r io.Reader) ([]listedPackage, error) {
	var out []listedPackage
	dec := json.NewDecoder(r)
	for {
		var p listedPackage
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
}

// listPackages is every package of the module in dir.
func listPackages(t *testing.T, dir string) []listedPackage {
	t.Helper()
	pkgs, err := parsePackages(strings.NewReader(string(goTool(t, dir, nil, "list", "-json", "./..."))))
	if err != nil {
		t.Fatalf("go list -json in %s: %v", dir, err)
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list -json in %s lists no package: nothing would be checked", dir)
	}
	return pkgs
}

// readPackages reads the packages of the module modPath in root from its
// Go files' package clauses and imports, without the go command: listing
// the test/ module through go list would load (and on a fresh machine
// download) all of its dependencies. Build constraints are not applied;
// testdata, hidden and _ folders and nested modules are left out.
func readPackages(root, modPath string) ([]listedPackage, error) {
	byDir := map[string]*listedPackage{}
	var dirs []string
	fset := token.NewFileSet()
	skip := func(rel, abs string) bool {
		base := path.Base(rel)
		if rel == "." {
			return false
		}
		if base == "testdata" || base == "vendor" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") {
			return true
		}
		_, err := os.Stat(filepath.Join(abs, "go.mod"))
		return err == nil
	}
	err := walkGoFiles(root, skip, func(rel, p string) error {
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("parse %s: %w", rel, err)
		}
		dir := path.Dir(rel)
		pkg := byDir[dir]
		if pkg == nil {
			pkg = &listedPackage{ImportPath: modPath}
			if dir != "." {
				pkg.ImportPath += "/" + dir
			}
			byDir[dir] = pkg
			dirs = append(dirs, dir)
		}
		var imports []string
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("parse %s: import %s: %w", rel, spec.Path.Value, err)
			}
			imports = append(imports, imp)
		}
		name := f.Name.Name
		switch {
		case !strings.HasSuffix(rel, "_test.go"):
			pkg.Name = name
			pkg.GoFiles = append(pkg.GoFiles, path.Base(rel))
			pkg.Imports = append(pkg.Imports, imports...)
		case strings.HasSuffix(name, "_test"):
			pkg.XTestImports = append(pkg.XTestImports, imports...)
		default:
			if pkg.Name == "" {
				pkg.Name = name
			}
			pkg.TestImports = append(pkg.TestImports, imports...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(dirs)
	var out []listedPackage
	for _, d := range dirs {
		p := byDir[d]
		for _, l := range []*[]string{&p.Imports, &p.TestImports, &p.XTestImports} {
			slices.Sort(*l)
			*l = slices.Compact(*l)
		}
		out = append(out, *p)
	}
	return out, nil
}

func inKit(p string) bool { return p == kitPath || strings.HasPrefix(p, kitPath+"/") }

// isTestHelper says whether a product package is test helper code: a
// library (not a main package, not tests only) that is test code by its
// name or links test code through its own files (forbiddenDep).
func isTestHelper(p listedPackage) bool {
	if p.Name == "main" || len(p.GoFiles) == 0 {
		return false
	}
	return forbiddenDep(p.ImportPath) != "" || slices.ContainsFunc(p.Imports, func(i string) bool { return forbiddenDep(i) != "" })
}

// isSubjectFake says whether p is a fake of the package it sits in, named
// after it: host/hostsim, vfio/vfiotest, internal/podresources/podresourcestest.
func isSubjectFake(p string, known map[string]bool) bool {
	subject := path.Dir(p)
	return known[subject] && (path.Base(p) == path.Base(subject)+"test" || path.Base(p) == path.Base(subject)+"sim")
}

// misplacedHelpers lists the product module's test helper packages that
// are neither in the kit nor a fake beside its subject, sorted.
func misplacedHelpers(pkgs []listedPackage) []string {
	known := map[string]bool{}
	for _, p := range pkgs {
		known[p.ImportPath] = true
	}
	var out []string
	for _, p := range pkgs {
		if isTestHelper(p) && !inKit(p.ImportPath) && !isSubjectFake(p.ImportPath, known) {
			out = append(out, p.ImportPath)
		}
	}
	slices.Sort(out)
	return out
}

// sharedHarnesses lists the test/ module's harnesses (libraries with
// non-test files) that more than one of its packages import, each with its
// importers: what two suites share belongs in the kit, a suite's own
// harness stays beside it.
func sharedHarnesses(pkgs []listedPackage) []string {
	importers := map[string][]string{}
	for _, p := range pkgs {
		seen := map[string]bool{p.ImportPath: true} // a package's external tests import it
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if !seen[imp] {
				seen[imp] = true
				importers[imp] = append(importers[imp], p.ImportPath)
			}
		}
	}
	var out []string
	for _, p := range pkgs {
		if p.Name == "main" || len(p.GoFiles) == 0 || len(importers[p.ImportPath]) < 2 {
			continue
		}
		by := slices.Sorted(slices.Values(importers[p.ImportPath]))
		out = append(out, p.ImportPath+" (imported by "+strings.Join(by, ", ")+")")
	}
	slices.Sort(out)
	return out
}

// Test helper code lives in the kit or beside its subject, in both modules,
// and the listing behind the check sees the kit.
func TestHarnessesLiveInTheKit(t *testing.T) {
	root := moduleRoot(t)
	product := listPackages(t, root)
	if !slices.ContainsFunc(product, func(p listedPackage) bool { return p.ImportPath == kitPath && isTestHelper(p) }) {
		t.Fatalf("go list does not show %s as test helper code: the check would see nothing", kitPath)
	}
	for _, p := range misplacedHelpers(product) {
		t.Errorf("%s is test helper code outside the kit (%s) and is no fake beside a subject of its name (host/hostsim, vfio/vfiotest): move it into the kit", p, kitPath)
	}
	testModule, err := readPackages(filepath.Join(root, "test"), modulePath+"/test")
	if err != nil {
		t.Fatalf("the test/ module's packages: %v", err)
	}
	if !slices.ContainsFunc(testModule, func(p listedPackage) bool {
		return slices.ContainsFunc(slices.Concat(p.Imports, p.TestImports), inKit)
	}) {
		t.Fatalf("no package of the test/ module imports the kit: the check would see nothing")
	}
	for _, s := range sharedHarnesses(testModule) {
		t.Errorf("the test/ module's harness %s serves more than one package: move it into the kit (%s)", s, kitPath)
	}
}

// Each rule fires on a planted violation, and not on look-alikes.
func TestKitRules(t *testing.T) {
	pkg := func(rel, name string, goFiles int, imports ...string) listedPackage {
		return listedPackage{ImportPath: modulePath + "/" + rel, Name: name, GoFiles: make([]string, goFiles), Imports: imports}
	}
	product := []listedPackage{
		pkg("host", "host", 3, "os"),
		pkg("host/hostsim", "hostsim", 2, modulePath+"/host", "testing"),
		pkg("vfio", "vfio", 3, modulePath+"/host"),
		pkg("vfio/vfiotest", "vfiotest", 1, "testing"),
		pkg("internal/podresources", "podresources", 1),
		pkg("internal/podresources/podresourcestest", "podresourcestest", 1, "net"), // a fake by its name alone
		pkg("internal/testutil", "testutil", 2, "testing"),
		pkg("internal/testutil/proc", "proc", 1, "os/exec", modulePath+"/internal/testutil"),
		pkg("internal/testutil/apiserver", "apiserver", 1, "sigs.k8s.io/controller-runtime/pkg/envtest"),
		pkg("demo", "main", 5, modulePath+"/internal/testutil/agenttest"),    // an application, not a library
		pkg("internal/archtest", "archtest", 0),                              // tests only
		pkg("internal/mixednode", "mixednode", 1),                            // a doc.go beside tests
		pkg("internal/names", "names", 1, "strings"),                         // product code
		pkg("internal/testutilx", "testutilx", 1, "os"),                      // only its name is close
		pkg("nri/gpucdi", "gpucdi", 2, "github.com/NVIDIA/go-nvml/pkg/nvml"), // not nvml/mock
		// Planted: a harness of its own beside the product, as internal/agenttest was.
		pkg("internal/agenttest", "agenttest", 4, modulePath+"/host/hostsim"),
		// Planted: a fake named after no package it sits in, as internal/deviceplugin/kubelettest was.
		pkg("internal/deviceplugin", "deviceplugin", 3),
		pkg("internal/deviceplugin/kubelettest", "kubelettest", 2, "testing"),
		// Planted: test code by its imports alone.
		pkg("kata/fixtures", "fixtures", 1, "github.com/stretchr/testify/require"),
		pkg("vgpu/sim", "sim", 1, modulePath+"/internal/testutil/proc"),
		// Planted: a fake of a subject that is not there.
		pkg("gone/gonetest", "gonetest", 1, "testing"),
	}
	wantProduct := []string{
		modulePath + "/gone/gonetest", modulePath + "/internal/agenttest", modulePath + "/internal/deviceplugin/kubelettest",
		modulePath + "/kata/fixtures", modulePath + "/vgpu/sim",
	}
	if got := misplacedHelpers(product); !slices.Equal(got, wantProduct) {
		t.Errorf("misplaced helpers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantProduct, "\n"))
	}

	test := modulePath + "/test"
	suite := func(rel string, testImports ...string) listedPackage {
		return listedPackage{ImportPath: test + "/" + rel, Name: path.Base(rel), GoFiles: []string{"doc.go"}, TestImports: testImports}
	}
	harness := func(rel string, imports ...string) listedPackage {
		return listedPackage{ImportPath: test + "/" + rel, Name: path.Base(rel), GoFiles: []string{"h.go"}, Imports: imports}
	}
	modulePkgs := []listedPackage{
		suite("cluster", test+"/internal/cluster", test+"/internal/simnode", kitPath+"/e2e"),
		suite("containerd", kitPath+"/e2e", test+"/internal/conf"),
		suite("kubelet", test+"/kubelet/internal/stub", kitPath+"/e2e"),
		harness("internal/cluster", test+"/internal/conf", kitPath+"/proc"), // the cluster suite's own
		harness("internal/simnode"),                                         // the cluster suite's own
		// The kubelet suite's own; its external tests import it too: still one importer.
		{ImportPath: test + "/kubelet/internal/stub", Name: "stub", GoFiles: []string{"stub.go"}, XTestImports: []string{test + "/kubelet/internal/stub"}},
		// Planted: a harness two packages share, as test/internal/containerdconf was.
		harness("internal/conf"),
		{ImportPath: test + "/internal/probe", Name: "main", GoFiles: []string{"main.go"}}, // a program, not a harness
		suite("tools"), // imported by nobody
	}
	wantShared := []string{test + "/internal/conf (imported by " + test + "/containerd, " + test + "/internal/cluster)"}
	if got := sharedHarnesses(modulePkgs); !slices.Equal(got, wantShared) {
		t.Errorf("shared harnesses:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantShared, "\n"))
	}
}

// go list -json's stream parses as the checks read it, and bad input is an
// error, never a short list.
func TestParsePackages(t *testing.T) {
	got, err := parsePackages(strings.NewReader(`{"ImportPath": "a", "Name": "a", "GoFiles": ["a.go"], "Imports": ["testing"]}
{"ImportPath": "b", "Name": "b", "TestImports": ["a"], "XTestImports": ["b"]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []listedPackage{
		{ImportPath: "a", Name: "a", GoFiles: []string{"a.go"}, Imports: []string{"testing"}},
		{ImportPath: "b", Name: "b", TestImports: []string{"a"}, XTestImports: []string{"b"}},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d packages, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ImportPath != w.ImportPath || g.Name != w.Name || !slices.Equal(g.GoFiles, w.GoFiles) || !slices.Equal(g.Imports, w.Imports) ||
			!slices.Equal(g.TestImports, w.TestImports) || !slices.Equal(g.XTestImports, w.XTestImports) {
			t.Errorf("package %d: %+v, want %+v", i, g, w)
		}
	}
	if _, err := parsePackages(strings.NewReader(`{"ImportPath": "a"} {"ImportPath": `)); err == nil {
		t.Error("a truncated stream parsed without an error")
	}
}

// readPackages sees what go list would: package names, non-test files,
// and the imports of the package, its tests and its external tests, and
// nothing of testdata, hidden folders or a nested module.
func TestReadPackages(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) { testutil.WriteFile(t, filepath.Join(root, rel), content) }
	write("go.mod", "module m\n")
	write("doc.go", "// Package top.\npackage top\n")
	write("h/h.go", "package h\n\nimport (\n\t\"os\"\n\tx \"m/k\"\n)\n")
	write("h/h2.go", "package h\n\nimport \"os\"\n")
	write("h/h_test.go", "package h\n\nimport \"testing\"\n")
	write("h/x_test.go", "package h_test\n\nimport (\n\t\"m/h\"\n\t\"testing\"\n)\n")
	write("s/s_test.go", "package s\n\nimport \"m/h\"\n")
	write("s/testdata/t.go", "package broken {\n")
	write(".hidden/x.go", "package broken {\n")
	write("sub/go.mod", "module other\n")
	write("sub/x.go", "package broken {\n")
	got, err := readPackages(root, "m")
	if err != nil {
		t.Fatal(err)
	}
	want := []listedPackage{
		{ImportPath: "m", Name: "top", GoFiles: []string{"doc.go"}},
		{ImportPath: "m/h", Name: "h", GoFiles: []string{"h.go", "h2.go"}, Imports: []string{"m/k", "os"}, TestImports: []string{"testing"}, XTestImports: []string{"m/h", "testing"}},
		{ImportPath: "m/s", Name: "s", TestImports: []string{"m/h"}},
	}
	if len(got) != len(want) {
		t.Fatalf("read %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ImportPath != w.ImportPath || g.Name != w.Name || !slices.Equal(g.GoFiles, w.GoFiles) || !slices.Equal(g.Imports, w.Imports) ||
			!slices.Equal(g.TestImports, w.TestImports) || !slices.Equal(g.XTestImports, w.XTestImports) {
			t.Errorf("package %d: %+v, want %+v", i, g, w)
		}
	}
	write("h/bad.go", "package h\n\nimport (\n")
	if _, err := readPackages(root, "m"); err == nil || !strings.Contains(err.Error(), "h/bad.go") {
		t.Errorf("a file that does not parse: err %v, want one naming h/bad.go", err)
	}
}

// No shipped command links the kit: every package of it is test code to
// forbiddenDep, whatever its own name.
func TestForbiddenDepCoversTheKit(t *testing.T) {
	for p, bad := range map[string]bool{
		kitPath:                      true,
		kitPath + "/proc":            true,
		kitPath + "/apiserver":       true,
		kitPath + "/agenttest":       true,
		kitPath + "/e2e":             true,
		kitPath + "/mountinfo":       true,
		kitPath + "/containerdconf":  true,
		kitPath + "x/proc":           false, // another package whose name only starts alike
		modulePath + "/internal/kit": false,
	} {
		if got := forbiddenDep(p) != ""; got != bad {
			t.Errorf("forbiddenDep(%q) = %q, want forbidden=%v", p, forbiddenDep(p), bad)
		}
	}
}
