package archtest

import (
	"path"
	"slices"
	"strings"
	"testing"
)

// wasmModules are the WebAssembly runtime (wazero, with its compiler) and
// the plugin glue (go-plugin) that containerd/nri's pkg/api imports for the
// host side of WASM plugins. The NRI plugin is an external NRI plugin over
// ttrpc and never runs WASM, so the product module replaces both with the
// stand-ins under third_party/nowasm: API only, every call an error.
func wasmModules() map[string]string {
	return map[string]string{
		"github.com/tetratelabs/wazero": "./third_party/nowasm/wazero",
		"github.com/knqyf263/go-plugin": "./third_party/nowasm/go-plugin",
	}
}

// moduleFormat makes go list print, per package, its path, its module and
// the module's replacement ("-" for none).
const moduleFormat = "{{.ImportPath}} {{with .Module}}{{.Path}} {{with .Replace}}{{.Path}}{{else}}-{{end}}{{end}}"

// wasmViolations lists the packages of a WASM runtime module that do not
// come from its stand-in, from go list output in moduleFormat.
func wasmViolations(out string) []string {
	var bad []string
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue // the standard library has no module
		}
		pkg, mod, replace := f[0], f[1], f[2]
		if standIn, ok := wasmModules()[mod]; ok && replace != standIn {
			bad = append(bad, pkg+" (module "+mod+", replaced by "+replace+"; want "+standIn+")")
		}
	}
	slices.Sort(bad)
	return bad
}

// The NRI plugin, with cgo (as make build and make images build it) and
// without, links no WebAssembly runtime: every package of wazero and
// go-plugin in its graph is the stand-in's, and none of wazero's engine.
func TestNRIPluginLinksNoWASMRuntime(t *testing.T) {
	root := moduleRoot(t)
	const cmd = modulePath + "/cmd/nri-gpu-plugin"
	for _, cgo := range []string{"1", "0"} {
		t.Run("CGO_ENABLED="+cgo, func(t *testing.T) {
			out := string(goTool(t, root, []string{"CGO_ENABLED=" + cgo}, "list", "-deps", "-f", moduleFormat, cmd))
			if !strings.Contains(out, "github.com/containerd/nri/pkg/api ") {
				t.Fatalf("%s does not link containerd/nri's pkg/api any more: check this test still guards something", cmd)
			}
			g := listDeps(t, root, cmd, cgo)
			for _, v := range wasmViolations(out) {
				t.Errorf("%s links %s, imported through %s", path.Base(cmd), v, strings.Join(g.chain(cmd, strings.Fields(v)[0]), " -> "))
			}
			for p := range g {
				if strings.HasPrefix(p, "github.com/tetratelabs/wazero/internal/") {
					t.Errorf("%s links wazero's %s", path.Base(cmd), p)
				}
			}
		})
	}
}

func TestWASMViolations(t *testing.T) {
	out := "fmt\n" +
		"github.com/containerd/nri/pkg/api github.com/containerd/nri -\n" +
		"github.com/tetratelabs/wazero github.com/tetratelabs/wazero ./third_party/nowasm/wazero\n" +
		"github.com/tetratelabs/wazero/internal/engine/wazevo github.com/tetratelabs/wazero -\n" +
		"github.com/knqyf263/go-plugin/wasm github.com/knqyf263/go-plugin ../elsewhere\n"
	want := []string{
		"github.com/knqyf263/go-plugin/wasm (module github.com/knqyf263/go-plugin, replaced by ../elsewhere; want ./third_party/nowasm/go-plugin)",
		"github.com/tetratelabs/wazero/internal/engine/wazevo (module github.com/tetratelabs/wazero, replaced by -; want ./third_party/nowasm/wazero)",
	}
	if got := wasmViolations(out); !slices.Equal(got, want) {
		t.Errorf("wasmViolations:\n got %q\nwant %q", got, want)
	}
}
