package archtest

import (
	"slices"
	"strings"
	"testing"
)

// What crosses between parts goes through internal/wire (the run files)
// and internal/vgpuconfig (the vGPU config), so that no reader links the
// part that writes:
//
//   - the device plugins, the validator and the operator (their packages
//     and their commands) link neither vfio nor vgpu, nor anything below
//     them;
//   - internal/wire links only the standard library, internal/atomicfile
//     and internal/names;
//   - internal/vgpuconfig links no package of this module (so neither host,
//     hostlock, podresources nor vgpu).

// importRule is a rule on what a set of packages may link.
type importRule struct {
	name string
	// subjects are module-relative package paths; "x/..." is x and every
	// package below it.
	subjects []string
	// forbid says why a subject must not link pkg, or "" when it may.
	forbid func(pkg string) string
}

// under reports whether p is the module's package rel or below it.
func under(p, rel string) bool {
	full := modulePath + "/" + rel
	return p == full || strings.HasPrefix(p, full+"/")
}

// standard reports whether p is in the standard library (no dot in its
// first element).
func standard(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".")
}

func wireRules() []importRule {
	return []importRule{
		{name: "readers link no writer part",
			subjects: []string{"kata/...", "kubevirt/...", "internal/plugincmd", "validator/...", "operator/...",
				"cmd/kata-device-plugin", "cmd/kubevirt-device-plugin", "cmd/sandbox-gpu-validator", "cmd/sandbox-gpu-operator"},
			forbid: func(p string) string {
				for _, part := range []string{"vfio", "vgpu"} {
					if under(p, part) {
						return "the " + part + " part: read its run files through internal/wire, the vGPU config through internal/vgpuconfig"
					}
				}
				return ""
			}},
		{name: "wire is a leaf",
			subjects: []string{"internal/wire"},
			forbid: func(p string) string {
				if standard(p) || under(p, "internal/wire") || p == modulePath+"/internal/atomicfile" || p == modulePath+"/internal/names" {
					return ""
				}
				return "internal/wire links only the standard library, internal/atomicfile and internal/names"
			}},
		{name: "the vGPU config is a leaf",
			subjects: []string{"internal/vgpuconfig"},
			forbid: func(p string) string {
				if under(p, "internal/vgpuconfig") || !strings.HasPrefix(p, modulePath+"/") {
					return ""
				}
				return "internal/vgpuconfig links no package of this module (no host, hostlock, podresources or vgpu)"
			}},
	}
}

// roots are the packages of g a subject names.
func roots(g depGraph, subject string) []string {
	rel, below := strings.CutSuffix(subject, "/...")
	var out []string
	for p := range g {
		if p == modulePath+"/"+rel || below && under(p, rel) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// reachable lists what root links in g, root included, sorted.
func (g depGraph) reachable(root string) []string {
	seen := map[string]bool{root: true}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if !seen[imp] {
				seen[imp] = true
				queue = append(queue, imp)
			}
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// check lists the rule's violations in g, each naming the subject, the
// package, why, and the import chain; a subject that names no package of g
// is a violation too (the rule would check nothing).
func (r importRule) check(g depGraph) []string {
	var out []string
	for _, s := range r.subjects {
		rs := roots(g, s)
		if len(rs) == 0 {
			out = append(out, r.name+": "+s+": no such package listed")
		}
		for _, root := range rs {
			for _, p := range g.reachable(root) {
				if why := r.forbid(p); why != "" {
					out = append(out, r.name+": "+depViolation{pkg: p, why: why, chain: g.chain(root, p)}.String())
				}
			}
		}
	}
	return out
}

// TestReadersLinkNoWriterPart: the rules hold over the product module as
// go list sees it.
func TestReadersLinkNoWriterPart(t *testing.T) {
	var patterns []string
	for _, r := range wireRules() {
		for _, s := range r.subjects {
			patterns = append(patterns, "./"+s)
		}
	}
	args := append([]string{"list", "-deps", "-f", listFormat}, patterns...)
	g := parseDeps(goTool(t, moduleRoot(t), []string{"CGO_ENABLED=0"}, args...))
	for _, r := range wireRules() {
		for _, v := range r.check(g) {
			t.Error(v)
		}
	}
}

// Each rule fails on a graph that breaks it, naming the chain, and passes
// on one that keeps it.
func TestWireRulesFailOnPlantedViolations(t *testing.T) {
	m := func(rel string) string { return modulePath + "/" + rel }
	clean := depGraph{
		m("cmd/kata-device-plugin"):     {m("kata")},
		m("cmd/kubevirt-device-plugin"): {m("kubevirt")},
		m("cmd/sandbox-gpu-validator"):  {m("validator")},
		m("cmd/sandbox-gpu-operator"):   {m("operator/controllers"), m("internal/shell")},
		m("kata"):                       {m("internal/plugincmd"), m("host")},
		m("kubevirt"):                   {m("internal/plugincmd"), "kubevirt.io/api/core/v1"},
		m("internal/plugincmd"):         {m("internal/wire"), m("host")},
		m("validator"):                  {m("internal/wire")},
		m("operator/controllers"):       {m("internal/vgpuconfig"), m("internal/names")},
		m("internal/shell"):             {m("host")},
		m("internal/wire"):              {m("internal/atomicfile"), m("internal/names"), "encoding/json"},
		m("internal/vgpuconfig"):        {"sigs.k8s.io/yaml", "fmt"},
		m("internal/atomicfile"):        {"os"},
		m("internal/names"):             {"path/filepath"},
		m("host"):                       {"os"},
		"kubevirt.io/api/core/v1":       nil,
		"sigs.k8s.io/yaml":              nil,
		"encoding/json":                 nil, "fmt": nil, "os": nil, "path/filepath": nil,
	}
	for _, r := range wireRules() {
		if v := r.check(clean); len(v) != 0 {
			t.Errorf("rule %q fails on the clean graph: %v", r.name, v)
		}
	}
	for _, c := range []struct {
		name  string
		plant func(g depGraph)
		rule  string
		want  string
	}{
		{"the operator linking vgpu for its default config", func(g depGraph) {
			g[m("operator/controllers")] = append(g[m("operator/controllers")], m("vgpu"))
			g[m("vgpu")] = []string{m("host")}
		}, "readers link no writer part",
			m("vgpu") + " (the vgpu part: read its run files through internal/wire, the vGPU config through internal/vgpuconfig), imported through " +
				m("cmd/sandbox-gpu-operator") + " -> " + m("operator/controllers") + " -> " + m("vgpu")},
		{"plugincmd linking vfio for the ready file", func(g depGraph) {
			g[m("internal/plugincmd")] = append(g[m("internal/plugincmd")], m("vfio"))
			g[m("vfio")] = nil
		}, "readers link no writer part",
			m("vfio") + " (the vfio part: read its run files through internal/wire, the vGPU config through internal/vgpuconfig), imported through " +
				m("cmd/kata-device-plugin") + " -> " + m("kata") + " -> " + m("internal/plugincmd") + " -> " + m("vfio")},
		{"the validator linking a package below vgpu", func(g depGraph) {
			g[m("validator")] = append(g[m("validator")], m("vgpu/cli"))
			g[m("vgpu/cli")] = nil
		}, "readers link no writer part", m("vgpu/cli") + " (the vgpu part"},
		{"wire linking host", func(g depGraph) {
			g[m("internal/wire")] = append(g[m("internal/wire")], m("host"))
		}, "wire is a leaf",
			m("host") + " (internal/wire links only the standard library, internal/atomicfile and internal/names), imported through " +
				m("internal/wire") + " -> " + m("host")},
		{"wire linking a module of others", func(g depGraph) {
			g[m("internal/wire")] = append(g[m("internal/wire")], "sigs.k8s.io/yaml")
		}, "wire is a leaf", "sigs.k8s.io/yaml (internal/wire links only"},
		{"the config leaf linking hostlock through names", func(g depGraph) {
			g[m("internal/vgpuconfig")] = append(g[m("internal/vgpuconfig")], m("internal/names"))
			g[m("internal/names")] = append(g[m("internal/names")], m("internal/hostlock"))
			g[m("internal/hostlock")] = nil
		}, "the vGPU config is a leaf",
			m("internal/hostlock") + " (internal/vgpuconfig links no package of this module (no host, hostlock, podresources or vgpu)), imported through " +
				m("internal/vgpuconfig") + " -> " + m("internal/names") + " -> " + m("internal/hostlock")},
		{"a subject missing from the listing", func(g depGraph) {
			delete(g, m("internal/plugincmd"))
		}, "readers link no writer part", "readers link no writer part: internal/plugincmd: no such package listed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := depGraph{}
			for p, imps := range clean {
				g[p] = slices.Clone(imps)
			}
			c.plant(g)
			var found []string
			for _, r := range wireRules() {
				if r.name == c.rule {
					found = r.check(g)
				}
			}
			if !slices.ContainsFunc(found, func(v string) bool { return strings.Contains(v, c.want) }) {
				t.Errorf("rule %q: violations %q lack %q", c.rule, found, c.want)
			}
		})
	}
}
