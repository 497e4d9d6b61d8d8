package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Each program rule fires on a planted violation, and not on the code it
// allows (lines are the file's: the package clause is line 1).
func TestMainRule(t *testing.T) {
	const imports = "import (\n\t\"os\"\n\n\t\"" + modulePath + "/internal/shell\"\n\t\"" + modulePath + "/vfio/cli\"\n)\n\n"
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"the one line", imports + "func main() { os.Exit(shell.Main(cli.Program())) }\n", nil},
		{"a program kept in main",
			imports + "func main() { os.Exit(shell.Main(program())) }\n\nfunc program() *shell.Program { return cli.Program() }\n",
			[]string{"one-line-main:10", "one-line-main:12"}},
		{"two statements",
			imports + "func main() {\n\tprintln(\"x\")\n\tos.Exit(shell.Main(cli.Program()))\n}\n", []string{"one-line-main:10"}},
		{"an argument to Program", imports + "func main() { os.Exit(shell.Main(cli.Program(nil))) }\n", []string{"one-line-main:10"}},
		{"a part imported instead of its cli",
			"import (\n\t\"os\"\n\n\t\"" + modulePath + "/internal/shell\"\n\t\"" + modulePath + "/kata\"\n)\n\nfunc main() { os.Exit(shell.Main(kata.Program())) }\n",
			[]string{"one-line-main:7", "one-line-main:1", "one-line-main:10"}},
		{"a flag parsed in main",
			"import (\n\t\"flag\"\n\t\"os\"\n\n\t\"" + modulePath + "/internal/shell\"\n\t\"" + modulePath + "/vfio/cli\"\n)\n\nvar v = flag.Bool(\"v\", false, \"\")\n\nfunc main() { os.Exit(shell.Main(cli.Program())) }\n",
			[]string{"one-line-main:4", "one-line-main:11"}},
		{"no main", imports + "func init() {}\n", []string{"one-line-main:10", "one-line-main:1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := "package main\n\n" + c.src
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "main.go", src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse: %v\n%s", err, src)
			}
			var got []string
			for _, fd := range checkMain(fset, "cmd/x/main.go", f) {
				got = append(got, fd.rule+":"+strconv.Itoa(fd.line))
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("findings %v, want %v in\n%s", got, c.want, src)
			}
		})
	}
}

func TestSimulatedRule(t *testing.T) {
	for _, c := range []struct {
		name, body string
		shell      bool
		want       []string
	}{
		{"the old Env.Simulated and its use",
			"func (e *Env) Simulated() bool { return e.sim != nil }\n\nfunc f(env *Env) bool { return env.Simulated() }",
			false, []string{"simulated-host:1", "simulated-host:3"}},
		{"a field named Simulated", "type O struct{ Simulated bool }", false, []string{"simulated-host:1"}},
		{"the shell's old option", "type IO struct{ Host *string }\n\ntype Env struct{ sim *string }", true, []string{"simulated-host:3"}},
		{"a simulate option in the shell", "func WithSimulator() {}", true, []string{"simulated-host:1"}},
		{"sim names outside the shell", "var simulated = 1\n\nfunc simulateCommand() {}", false, nil},
		{"look-alikes in the shell", "var similar, Simple = 1, 2\n\nfunc f(single int) {}", true, nil},
		{"sim words in the shell", "var simHost, SimRoot, sim = 1, 2, 3", true, []string{"simulated-host:1", "simulated-host:1", "simulated-host:1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := "package x\n\n" + c.body + "\n"
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "x.go", src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("parse: %v\n%s", err, src)
			}
			var got []string
			for _, fd := range checkSimulated(fset, "a/x.go", f, c.shell) {
				got = append(got, fd.rule+":"+strconv.Itoa(fd.line-2))
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("findings %v, want %v in\n%s", got, c.want, c.body)
			}
		})
	}
}

// A command folder with a second file fails; the real tree's shape passes.
func TestProgramsOnATree(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	one := "package main\n\nimport (\n\t\"os\"\n\n\t\"" + modulePath + "/internal/shell\"\n\t\"" + modulePath + "/a/cli\"\n)\n\nfunc main() { os.Exit(shell.Main(cli.Program())) }\n"
	write("cmd/a/main.go", one)
	write("cmd/a/main_test.go", "package main\n\nfunc helper() {}\n")
	write("internal/shell/env.go", "package shell\n\ntype Env struct{}\n")
	findings, err := checkPrograms(root)
	if err != nil || len(findings) != 0 {
		t.Fatalf("a clean tree: %v %v", findings, err)
	}
	write("cmd/b/main.go", one)
	write("cmd/b/program.go", "package main\n\nfunc program() {}\n")
	write("internal/shell/env.go", "package shell\n\ntype Env struct{ sim *int }\n\nfunc (e *Env) Simulated() bool { return e.sim != nil }\n")
	findings, err = checkPrograms(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range findings {
		got = append(got, f.String())
	}
	want := []string{
		"cmd/b/program.go:1: one-line-main: a command's only file is main.go (the program belongs in its part's cli package)",
		"internal/shell/env.go:3: simulated-host: internal/shell declares sim (a simulated-host option)",
		"internal/shell/env.go:5: simulated-host: declares Simulated",
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The host-link check finds package host or one below it through any
// chain, and nothing in a graph without it.
func TestHostChain(t *testing.T) {
	shell := modulePath + "/internal/shell"
	g := depGraph{
		shell:                       {"fmt", modulePath + "/internal/x"},
		modulePath + "/internal/x":  {modulePath + "/host"},
		modulePath + "/host":        {"os"},
		modulePath + "/hostroots":   nil,
		modulePath + "/internal/yz": nil,
	}
	if got, want := hostChain(g, shell), []string{shell, modulePath + "/internal/x", modulePath + "/host"}; !slices.Equal(got, want) {
		t.Errorf("chain %v, want %v", got, want)
	}
	clean := depGraph{shell: {"fmt", modulePath + "/internal/hostrootsish"}, modulePath + "/internal/hostrootsish": nil}
	if c := hostChain(clean, shell); c != nil {
		t.Errorf("a graph without host: %v", c)
	}
}
