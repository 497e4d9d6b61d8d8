package archtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Each rule fires on the code it is meant for, and not on look-alikes.
func TestCheckFileRules(t *testing.T) {
	for _, c := range []struct {
		name string
		body string // after the package clause and imports of every case
		want []string
	}{
		{"root accessor in an error, as vfio/plan.go had it",
			`func f(p *P, a string) error { return fmt.Errorf("no PCI function %s under %s", a, p.Host.SysfsRoot()) }`,
			[]string{"root-accessor:1"}},
		{"root accessors logged or joined, as plugincmd had it",
			"func f(h *H) {\n\tlog.Info(\"x\", \"sysfs\", h.SysfsRoot())\n\t_ = filepath.Join(h.DevRoot(), \"vfio\")\n\t_ = h.ProcRoot()\n}",
			[]string{"root-accessor:2", "root-accessor:3", "root-accessor:4"}},
		{"root fields of host.Options are no accessor",
			`func f(o O) (string, string) { return o.SysfsRoot, o.DevRoot }`, nil},
		{"an accessor with arguments is another method",
			`func f(x X) { x.DevRoot("/tmp") }`, nil},
		{"the shell's root flags read by a command",
			"func f(env *E) {\n\t_ = env.Roots.Sysfs\n\t_, _ = env.Roots.Dev, env.Roots.Proc\n}",
			[]string{"shell-roots:2", "shell-roots:3", "shell-roots:3"}},
		{"other fields of Roots or of another struct",
			`func f(env *E, r R) { _, _ = r.Sysfs, env.Other.Dev }`, nil},
		{"filepath.Glob, as plugincmd's sysfs globs",
			`func f(root string) { m, _ := filepath.Glob(filepath.Join(root, "bus/pci/devices/*/driver")); _ = m }`,
			[]string{"glob:1"}},
		{"Glob under an alias and io/fs's Glob",
			"func f(fsys fs.FS) {\n\t_, _ = fp.Glob(\"x*\")\n\t_, _ = fs.Glob(fsys, \"y*\")\n}",
			[]string{"glob:2", "glob:3"}},
		{"a method named Glob is no file-system glob",
			`func f(w W) { w.Glob("x*"); _ = path.Base("a") }`, nil},
		{"sysfs and proc literals, quoted and raw, in a constant too",
			"const modules = \"/sys/module\"\n\nfunc f() {\n\t_, _ = os.ReadFile(\"/proc/devices\")\n\t_ = `/proc/self/fd`\n\t_ = []string{\"/sys\", \"/proc\"}\n}",
			[]string{"host-path-literal:1", "host-path-literal:4", "host-path-literal:5", "host-path-literal:6", "host-path-literal:6"}},
		{"the node's modules folder named outside package host",
			"func f(rel string) {\n\t_, _ = os.ReadFile(filepath.Join(\"/lib/modules\", rel, \"modules.dep\"))\n\t_ = \"/lib/modules/6.1.0-57-amd64\"\n\t_ = []string{\"/lib/modulesx\", \"lib/modules\", \"/usr/lib/modules\"}\n}",
			[]string{"host-path-literal:2", "host-path-literal:3"}},
		{"look-alike literals and struct tags",
			"type T struct {\n\tA string `path:\"/sys\"`\n}\n\nfunc f() []string { return []string{\"/system\", \"/sysfs-root\", \"/processes\", \"sys/bus\", \"x/proc/y\"} }",
			nil},
		{"/dev read by literal, joined or direct",
			"func f(st *unix.Stat_t) {\n\t_, _ = os.Stat(\"/dev/vfio/vfio\")\n\t_, _ = os.ReadDir(filepath.Join(\"/dev\", \"vfio\"))\n\t_ = unix.Stat(\"/dev/nvidia0\", st)\n\t_, _ = filepath.EvalSymlinks(\"/dev/disk\")\n}",
			[]string{"dev-read:2", "dev-read:3", "dev-read:4", "dev-read:5"}},
		{"/dev as a container path, a prefix test or under a root is no read",
			"func f(root, p string) {\n\t_ = N{Path: \"/dev/nvidia0\"}\n\t_ = strings.HasPrefix(p, \"/dev/nvidia\")\n\t_, _ = os.Stat(filepath.Join(root, \"dev\"))\n\t_ = filepath.Join(\"/dev\", p)\n}",
			nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			header := "package x\n\nimport (\n\t\"fmt\"\n\t\"io/fs\"\n\t\"os\"\n\t\"path\"\n\t\"path/filepath\"\n\tfp \"path/filepath\"\n\t\"strings\"\n\n\t\"golang.org/x/sys/unix\"\n)\n\n"
			got := syntheticFindings(t, header, c.body, checkFile)
			if !slices.Equal(got, c.want) {
				t.Errorf("findings %v, want %v in\n%s", got, c.want, c.body)
			}
		})
	}
}

// checkTree looks at the product code only, and at all of it.
func TestCheckTreeSkipsWhatIsNotProductCode(t *testing.T) {
	root := t.TempDir()
	bad := "package x\n\nfunc f() string { return \"/sys/bus/pci\" }\n"
	write := func(rel, content string) { t.Helper(); writeTreeFile(t, root, rel, content) }
	write("go.mod", "module "+modulePath+"\n")
	for _, rel := range []string{
		"main.go", "a/a.go", "cmd/x/main.go", "demo/demo.go", "b/host/x.go", "vfio/testing.go", "operator/operandsx/o.go",
	} {
		write(rel, bad)
	}
	for _, rel := range []string{
		"a/a_test.go", "host/host.go", "host/hostsim/sim.go", "test/cluster/c.go", "hack/noskip/main.go",
		"vfio/vfiotest/v.go", "internal/testutil/kubelettest/k.go", "internal/testutil/u.go", "nri/nritest/n.go",
		"internal/testutil/proc/p.go", "internal/testutil/e2e/e.go",
		"sub/x.go", "a/testdata/x.go", ".cache/x.go", "_old/x.go", "vendor/v/v.go", "a/notes.txt",
	} {
		write(rel, bad)
	}
	write("sub/go.mod", "module other\n")
	got, err := checkTree(root)
	if err != nil {
		t.Fatal(err)
	}
	files := findingFiles(got)
	want := []string{"a/a.go", "b/host/x.go", "cmd/x/main.go", "demo/demo.go", "main.go", "operator/operandsx/o.go", "vfio/testing.go"}
	if !slices.Equal(files, want) {
		t.Errorf("files with findings %v, want %v", files, want)
	}

	write("a/broken.go", "package x\n\nfunc {\n")
	if _, err := checkTree(root); err == nil || !strings.Contains(err.Error(), "a/broken.go") {
		t.Errorf("a file that does not parse: err %v, want one naming a/broken.go", err)
	}
}

func TestApplyAllowList(t *testing.T) {
	at := func(rule, file string) finding { return finding{rule: rule, file: file, line: 1} }
	allow := []allowed{
		{ruleHostPathLiteral, "operator/operands", "mounts"},
		{ruleGlob, "kata/cdi.go", "own folder"},
		{ruleShellRoots, "internal/shell", "owner"},
	}
	findings := []finding{
		at(ruleHostPathLiteral, "operator/operands/operands.go"), // covered by its folder
		at(ruleHostPathLiteral, "operator/operandsx/o.go"),       // another folder
		at(ruleGlob, "operator/operands/operands.go"),            // another rule
		at(ruleGlob, "kata/cdi.go"),                              // covered by its file
		at(ruleGlob, "kata/cdi.go.bak/x.go"),                     // not that file
	}
	violations, stale := applyAllowList(findings, allow)
	if want := []finding{findings[1], findings[2], findings[4]}; !slices.Equal(violations, want) {
		t.Errorf("violations %v, want %v", violations, want)
	}
	if want := []allowed{allow[2]}; !slices.Equal(stale, want) {
		t.Errorf("stale entries %v, want %v", stale, want)
	}
}

// Every allow-list entry names a rule, a place that exists and a reason.
func TestAllowListEntries(t *testing.T) {
	root := moduleRoot(t)
	rules := []string{ruleRootAccessor, ruleShellRoots, ruleGlob, ruleHostPathLiteral, ruleDevRead}
	for _, a := range allowList() {
		if !slices.Contains(rules, a.rule) {
			t.Errorf("allow-list entry %s: no such rule", a.path)
		}
		if strings.TrimSpace(a.reason) == "" {
			t.Errorf("allow-list entry %s %s: no reason", a.rule, a.path)
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(a.path))); err != nil {
			t.Errorf("allow-list entry %s %s: %v", a.rule, a.path, err)
		}
	}
}
