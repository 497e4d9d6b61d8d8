// Package archtest holds tests only: they keep the architecture's rules
// holding over the whole product module.
//
//   - deps_test.go: no shipped command (a main package under cmd/) links
//     test code: the package testing, the simulated kernel (host/hostsim),
//     the test kit (internal/testutil/...), our test helper packages
//     (*test, *testutil) or a test library.
//   - kit_test.go: cross-part test harnesses live only in the test kit;
//     a fake of one subject stays beside it, named after it.
//   - hostdoor_test.go: only package host reads sysfs, /dev and /proc; no
//     other product code asks the host model for its roots, reads the
//     shell's root flags, globs, names a path of /sys or /proc, or hands a
//     /dev path to a file-system call (a short allow-list says where and
//     why not).
//   - hostview_test.go: outside the program wiring (cmd/, cli packages,
//     internal/plugincmd, demo/) no product code names *host.Host; each
//     consumer declares the interface of what it uses.
//   - wire_test.go: the plugins, the validator and the operator link
//     neither vfio nor vgpu (what crosses processes is internal/wire, the
//     vGPU config is the leaf internal/vgpuconfig); wire and vgpuconfig
//     link nothing of the host.
//   - apiserverdoor_test.go: one door to the API server (internal/kubeclient,
//     internal/ownnode); the VFIO manager links no typed client.
//   - programs_test.go: every main is the one line
//     os.Exit(shell.Main(cli.Program())); no simulated-host branch in
//     product code; internal/shell and the operator link no host model.
//   - knobs_test.go: no test knob in what a user installs (no testing key
//     in the chart's values, no "for tests only" anywhere in the product).
//   - modules_test.go: the k8s.io modules of every go.mod are at one
//     Kubernetes release, and every go.mod pins the toolchain.
//   - wasm_test.go: the NRI plugin links no WebAssembly runtime (wazero
//     and go-plugin come from the stand-ins in third_party/nowasm).
//
// Each rule is proven able to fail by a table test on synthetic input.
package archtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// modulePath is the product module's path.
const modulePath = "github.com/sandbox-gpu/sandbox-gpu"

// moduleRoot is the folder of the product module's go.mod, found upward
// from the test's folder.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working folder: %v", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module "+modulePath+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the test's folder", modulePath)
		}
		dir = parent
	}
}

// goTool runs the go command in dir with extra environment and returns
// its standard output, failing the test (with standard error) when it
// fails.
func goTool(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s (%s): %v\n%s", strings.Join(args, " "), strings.Join(env, " "), err, stderr.Bytes())
	}
	return out
}
