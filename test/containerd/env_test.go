package containerd

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
)

const (
	// dirEnv overrides where hack/fetch-containerd.sh put its results (default <repo>/.cache/containerd).
	dirEnv    = "SANDBOX_GPU_CONTAINERD_DIR"
	fetchHint = "run hack/fetch-containerd.sh (as root) to install runc and busybox-static, build containerd " +
		"v2.4.2 and make the busybox image"

	// imageName is the image hack/fetch-containerd.sh makes: a busybox-static root filesystem whose
	// default command sleeps. It is both the pinned sandbox (pause) image and the workload image.
	imageName = "localhost/sandbox-gpu/busybox:test"
	runcPath  = "/usr/sbin/runc"
)

// Deadlines: generous for a loaded 2-core machine; polling returns as soon as the state is reached.
const (
	readyWithin   = 20 * time.Second // containerd answering CRI with RuntimeReady
	callWithin    = 30 * time.Second // one CRI call (RunPodSandbox, CreateContainer, ExecSync, ...)
	connectWithin = 20 * time.Second // the plugin connected (again) to containerd's NRI socket
	exitWithin    = 10 * time.Second // SIGTERM to exit, for containerd and the plugin
)

// hostEnv is what the host provides.
type hostEnv struct {
	repoRoot string
	binDir   string // containerd, containerd-shim-runc-v2, ctr
	image    string // OCI image-layout tarball of imageName
}

// requireHostEnv finds what the suite needs or skips the test naming what to run.
func requireHostEnv(t *testing.T) hostEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.MissingPeer(t, "the containerd suite runs containers: it needs root (run make test as root)")
	}
	root, err := e2e.RepoRoot()
	if err != nil {
		t.Fatalf("find the repository root: %v", err)
	}
	dir := os.Getenv(dirEnv)
	if dir == "" {
		dir = filepath.Join(root, ".cache", "containerd")
	}
	env := hostEnv{repoRoot: root, binDir: filepath.Join(dir, "bin"), image: filepath.Join(dir, "busybox-oci.tar")}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if _, err := exec.LookPath(filepath.Join(env.binDir, b)); err != nil {
			skipOrFail(t, "%s not found in %s (%s overrides the folder): %s", b, env.binDir, dirEnv, fetchHint)
		}
	}
	if _, err := exec.LookPath(runcPath); err != nil {
		skipOrFail(t, "%s not found: %s", runcPath, fetchHint)
	}
	if _, err := os.Stat(env.image); err != nil {
		skipOrFail(t, "no busybox image: %v: %s", err, fetchHint)
	}
	return env
}

func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	testutil.MissingPeer(t, format, args...)
}

// shortDir is a new folder for unix sockets, removed after the test: shim sockets are
// <dir>/s/<64 hex digits> and must stay under the 108-byte limit of a socket path.
func shortDir(t *testing.T, pattern string) string {
	t.Helper()
	base := os.TempDir()
	if len(base)+len(pattern)+len("/0123456789/s/")+64 >= 100 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, pattern)
	if err != nil {
		t.Fatalf("temporary folder: %v", err)
	}
	return dir
}
