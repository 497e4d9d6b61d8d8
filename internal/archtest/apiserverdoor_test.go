package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The rules of the one door to the API server: internal/kubeclient loads
// the client config (in-cluster or a kubeconfig) and internal/ownnode (with
// ownmeta) is a node daemon's way to its own Node, both through client-go.
// No other product package reads the pod's API credentials or builds its
// own HTTP client to the API server, as internal/nodereport did (a
// hand-written HTTPS Node client beside ownnode). Syntactic, per package.
const (
	// ruleAPICredentials: a string naming the pod's API server credentials
	// (KUBERNETES_SERVICE_HOST or _PORT, the service-account folder
	// .../secrets/kubernetes.io/serviceaccount) or a call of
	// rest.InClusterConfig: loading them is kubeclient's.
	ruleAPICredentials = "apiserver-credentials"
	// ruleAPIHTTPClient: an HTTP client to the API server built by hand:
	// net/http imported in a package that reads the credentials, or a
	// client or transport made from a rest.Config (rest.HTTPClientFor,
	// rest.TransportFor, client-go's transport package).
	ruleAPIHTTPClient = "apiserver-http-client"
)

// apiDoor are the packages (slash folders from the module root, with
// their subfolders) that are the door.
func apiDoor() []string { return []string{"internal/kubeclient", "internal/ownnode"} }

// apiFile is what one file shows of the rules.
type apiFile struct {
	rel       string
	netHTTP   int // line of its net/http import, 0 when none
	marks     []finding
	transport []finding // rest.HTTPClientFor, rest.TransportFor, client-go/transport
}

// checkAPIFile reads one parsed file.
func checkAPIFile(fset *token.FileSet, rel string, f *ast.File) apiFile {
	out := apiFile{rel: rel}
	line := func(n ast.Node) int { return fset.Position(n.Pos()).Line }
	imports := map[string]string{} // local name -> import path
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		name := path.Base(p)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imports[name] = p
		switch p {
		case "net/http":
			out.netHTTP = line(imp)
		case "k8s.io/client-go/transport":
			out.transport = append(out.transport, finding{ruleAPIHTTPClient, rel, line(imp), "imports client-go's transport"})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(n.Value)
			if n.Kind != token.STRING || err != nil {
				return true
			}
			if strings.Contains(s, "KUBERNETES_SERVICE_HOST") || strings.Contains(s, "KUBERNETES_SERVICE_PORT") ||
				strings.Contains(s, "secrets/kubernetes.io/serviceaccount") {
				out.marks = append(out.marks, finding{ruleAPICredentials, rel, line(n), "names " + strconv.Quote(s)})
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok || imports[id.Name] != "k8s.io/client-go/rest" {
				return true
			}
			switch sel.Sel.Name {
			case "InClusterConfig":
				out.marks = append(out.marks, finding{ruleAPICredentials, rel, line(n), "calls rest.InClusterConfig"})
			case "HTTPClientFor", "TransportFor":
				out.transport = append(out.transport, finding{ruleAPIHTTPClient, rel, line(n), "calls rest." + sel.Sel.Name})
			}
		}
		return true
	})
	return out
}

// checkAPIPackage applies the rules to the files of one package.
func checkAPIPackage(files []apiFile) []finding {
	var out []finding
	credentials := false
	for _, f := range files {
		out = append(append(out, f.marks...), f.transport...)
		credentials = credentials || len(f.marks) > 0
	}
	if credentials {
		for _, f := range files {
			if f.netHTTP > 0 {
				out = append(out, finding{ruleAPIHTTPClient, f.rel, f.netHTTP, "imports net/http in a package that reads the API server's credentials"})
			}
		}
	}
	return out
}

// inAPIDoor says whether a slash folder is the door or under it.
func inAPIDoor(dir string) bool {
	return slices.ContainsFunc(apiDoor(), func(d string) bool { return dir == d || strings.HasPrefix(dir, d+"/") })
}

// checkAPITree applies the rules to every product package under root
// outside the door (the files TestHostDoor checks).
func checkAPITree(root string) ([]finding, error) {
	pkgs := map[string][]apiFile{}
	err := eachProductFile(root, func(fset *token.FileSet, rel string, f *ast.File) {
		if !inAPIDoor(path.Dir(rel)) {
			pkgs[path.Dir(rel)] = append(pkgs[path.Dir(rel)], checkAPIFile(fset, rel, f))
		}
	})
	var out []finding
	for _, files := range pkgs {
		out = append(out, checkAPIPackage(files)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, err
}

// eachProductFile parses every non-test Go file of the product code under
// root (the folders skipDir leaves out aside) and hands it to fn with its
// slash path from root.
func eachProductFile(root string, fn func(fset *token.FileSet, rel string, f *ast.File)) error {
	fset := token.NewFileSet()
	return walkGoFiles(root, skipDir, func(rel, p string) error {
		if strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", rel, err)
		}
		fn(fset, rel, f)
		return nil
	})
}

// One door to the API server: outside internal/kubeclient and
// internal/ownnode no product package reads the pod's credentials or
// builds its own HTTP client to the API server.
func TestOneAPIServerDoor(t *testing.T) {
	findings, err := checkAPITree(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Errorf("%s: reach the API server through client-go's clients from internal/kubeclient (and internal/ownnode for the own Node)", f)
	}
}

// Each rule of the API server door fires on the code it is meant for, and
// not on look-alikes: a package of the synthetic files named, each after
// its package clause.
func TestAPIDoorRules(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  []string // rule:file:line
	}{
		{"the hand-written client as internal/nodereport had it", map[string]string{
			"client.go": "import (\n\t\"net/http\"\n\t\"net/url\"\n)\n\nvar _ = http.MethodGet\nvar _ url.URL",
			"incluster.go": "import \"os\"\n\nconst dir = \"/var/run/secrets/kubernetes.io/serviceaccount\"\n\n" +
				"func f() string { return os.Getenv(\"KUBERNETES_SERVICE_HOST\") + os.Getenv(\"KUBERNETES_SERVICE_PORT\") }",
		}, []string{"apiserver-credentials:incluster.go:5", "apiserver-credentials:incluster.go:7", "apiserver-credentials:incluster.go:7",
			"apiserver-http-client:client.go:4"}},
		{"credentials read without net/http are still read", map[string]string{
			"a.go": "import \"os\"\n\nfunc f() ([]byte, error) { return os.ReadFile(\"/run/secrets/kubernetes.io/serviceaccount/token\") }",
		}, []string{"apiserver-credentials:a.go:5"}},
		{"in-cluster config and a client built from a rest.Config", map[string]string{
			"a.go": "import (\n\tkrest \"k8s.io/client-go/rest\"\n\t\"k8s.io/client-go/transport\"\n)\n\n" +
				"func f() {\n\tc, _ := krest.InClusterConfig()\n\t_, _ = krest.HTTPClientFor(c)\n\t_, _ = krest.TransportFor(c)\n\t_ = transport.New\n}",
		}, []string{"apiserver-credentials:a.go:9", "apiserver-http-client:a.go:10", "apiserver-http-client:a.go:11", "apiserver-http-client:a.go:5"}},
		{"net/http alone (a health listener) and look-alikes", map[string]string{
			"listen.go": "import \"net/http\"\n\nvar _ = http.ListenAndServe",
			"other.go":  "import \"example.com/rest\"\n\nfunc f() { _, _ = rest.InClusterConfig(); _ = \"KUBERNETES_SERVICE\"; _ = \"/var/run/secrets/other\" }",
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			fset := token.NewFileSet()
			var files []apiFile
			for _, name := range slices.Sorted(maps.Keys(c.files)) {
				f, err := parser.ParseFile(fset, name, "package p\n\n"+c.files[name], parser.SkipObjectResolution)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, checkAPIFile(fset, name, f))
			}
			var got []string
			for _, f := range checkAPIPackage(files) {
				got = append(got, fmt.Sprintf("%s:%s:%d", f.rule, f.file, f.line))
			}
			sort.Strings(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	for dir, want := range map[string]bool{"internal/kubeclient": true, "internal/ownnode/ownmeta": true, "internal/ownnodex": false, "vfio": false} {
		if inAPIDoor(dir) != want {
			t.Errorf("inAPIDoor(%q) = %v, want %v", dir, !want, want)
		}
	}
}

// heavyClientDeps lists what root links of the typed Kubernetes client
// (k8s.io/api, client-go's kubernetes clientset), each with its import
// chain: the VFIO manager reaches its Node through the metadata client
// (ownmeta.Metadata) and stays that small (README, "Performance").
func heavyClientDeps(g depGraph, root string) []string {
	var out []string
	for p := range g {
		if p == "k8s.io/api" || strings.HasPrefix(p, "k8s.io/api/") || p == "k8s.io/client-go/kubernetes" || strings.HasPrefix(p, "k8s.io/client-go/kubernetes/") {
			out = append(out, p+" through "+strings.Join(g.chain(root, p), " -> "))
		}
	}
	sort.Strings(out)
	return out
}

// The VFIO manager links no typed Kubernetes client: its own-Node door is
// client-go's metadata client (TestOneAPIServerDoor keeps every door in
// kubeclient and ownnode).
func TestVFIOManagerLinksNoTypedClient(t *testing.T) {
	root := modulePath + "/cmd/vfio-manager"
	g := listDeps(t, moduleRoot(t), root, "0")
	if _, ok := g[modulePath+"/internal/kubeclient"]; !ok {
		t.Fatalf("go list -deps %s lists no internal/kubeclient: the check looks at the wrong graph", root)
	}
	heavy := heavyClientDeps(g, root)
	for i, v := range heavy {
		if i == 3 {
			t.Errorf("... and %d more", len(heavy)-i)
			break
		}
		t.Errorf("vfio-manager links %s: use ownmeta.Metadata and kubeclient.Metadata", v)
	}
}

func TestHeavyClientDeps(t *testing.T) {
	g := depGraph{
		"cmd/x":                                {"vfio", "k8s.io/client-go/metadata"},
		"vfio":                                 {"ownnode"},
		"ownnode":                              {"k8s.io/api/core/v1", "k8s.io/client-go/kubernetes"},
		"k8s.io/api/core/v1":                   nil,
		"k8s.io/client-go/kubernetes":          {"k8s.io/api/core/v1"},
		"k8s.io/client-go/metadata":            {"k8s.io/apimachinery/pkg/apis/meta/v1"},
		"k8s.io/apimachinery/pkg/apis/meta/v1": nil,
	}
	want := []string{"k8s.io/api/core/v1 through cmd/x -> vfio -> ownnode -> k8s.io/api/core/v1",
		"k8s.io/client-go/kubernetes through cmd/x -> vfio -> ownnode -> k8s.io/client-go/kubernetes"}
	if got := heavyClientDeps(g, "cmd/x"); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	delete(g, "ownnode")
	delete(g, "k8s.io/api/core/v1")
	delete(g, "k8s.io/client-go/kubernetes")
	g["vfio"] = []string{"k8s.io/client-go/metadata"}
	if got := heavyClientDeps(g, "cmd/x"); len(got) != 0 {
		t.Errorf("the metadata client alone: got %q", got)
	}
}
