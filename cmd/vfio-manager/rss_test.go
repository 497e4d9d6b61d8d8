package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	sharedapi "github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

var apiserver sharedapi.Shared

func TestMain(m *testing.M) { os.Exit(apiserver.Run(m)) }

// BenchmarkRSS: the VFIO manager daemon's resident memory on the simulated
// HGX host, its own Node on a real API server through client-go (the one
// own-Node door, internal/ownnode), in its two modes that talk to the
// Node: split (--vm-gpus-from-node: the Node watched, the split's report
// published) and release (--release: the report patched). The host's
// GPUs are already where the Node wants them (vm-gpus=0: every GPU on
// nvidia; nothing on vfio to release): the simulated kernel answers driver
// writes only in its own process, and this measures the daemon's own.
// RSS-start-MiB is once /healthz answers, RSS-reported-MiB once the report
// is on the Node; binary-MiB is the binary as make build strips it.
func BenchmarkRSS(b *testing.B) {
	cfg := apiserver.Config(b)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	bin := buildStripped(b)
	kubeconfig := sharedapi.Kubeconfig(b, cfg)
	for _, c := range daemonCases() {
		b.Run(c.name, func(b *testing.B) { measureDaemon(b, cs, bin, c, "--kubeconfig", kubeconfig) })
	}
}

// daemonCase is one way to run the daemon against its Node.
type daemonCase struct {
	name        string
	args        []string          // after "daemon"
	annotations map[string]string // the Node's at start
	report      string            // the annotation the daemon reports in
	done        func(value string) bool
}

func daemonCases() []daemonCase {
	return []daemonCase{
		{name: "split", args: []string{"--vm-gpus-from-node"}, annotations: map[string]string{names.VMGPUsAnnotation: "0"},
			report: names.VMGPUsReportAnnotation, done: func(v string) bool {
				s, err := wire.ParseSplitReport(v)
				return err == nil && s.Ready && s.Declared == "0" && len(s.Container) == 8
			}},
		{name: "release", args: []string{"--release"},
			report: names.ReleaseReportAnnotation(names.VFIOManager), done: func(v string) bool {
				r, err := wire.ParseReleaseReport(v)
				return err == nil && r.Done
			}},
	}
}

// buildStripped builds vfio-manager as make build does (static, trimmed,
// no symbols).
func buildStripped(b *testing.B) string {
	b.Helper()
	out := filepath.Join(b.TempDir(), "vfio-manager")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, o)
	}
	return out
}

// measureDaemon runs the daemon of c (with the extra arguments) b.N
// times, each on a fresh simulated host and Node, and reports its RSS once
// started and once reported, and the binary's size. The daemon must exit 0
// on SIGTERM.
func measureDaemon(b *testing.B, cs kubernetes.Interface, bin string, c daemonCase, extra ...string) {
	st, err := os.Stat(bin)
	if err != nil {
		b.Fatal(err)
	}
	var started, reported int64
	for i := 0; i < b.N; i++ {
		node := "rss-" + c.name
		nodes := cs.CoreV1().Nodes()
		ctx := context.Background()
		if err := nodes.Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
		if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: c.annotations}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		k, _ := hostsim.NewHost(b, "hgx-h100")
		o := k.Options()
		addr := freeAddr(b)
		args := append(append([]string{"daemon"}, c.args...), "--node-name", node, "--ready-dir", b.TempDir(), "--health-addr", addr,
			"--pod-resources-socket", "", "--sysfs-root", o.SysfsRoot, "--dev-root", o.DevRoot, "--proc-root", o.ProcRoot, "--modules-dir", o.ModulesDir)
		p := proc.StartProgram(b, bin, append(args, extra...)...)
		rss := func() int64 {
			n, err := proc.RSS(p.Cmd.Process.Pid)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
		testutil.Eventually(b, 20*time.Second, "/healthz on "+addr, func() bool {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				return false
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		started += rss()
		testutil.Eventually(b, 30*time.Second, "node "+node+": a finished report in "+c.report, func() bool {
			n, err := nodes.Get(ctx, node, metav1.GetOptions{})
			return err == nil && c.done(n.Annotations[c.report])
		})
		reported += rss()
		p.Stop(b, 10*time.Second)
	}
	b.ReportMetric(float64(started)/float64(b.N)/(1<<20), "RSS-start-MiB")
	b.ReportMetric(float64(reported)/float64(b.N)/(1<<20), "RSS-reported-MiB")
	b.ReportMetric(float64(st.Size())/(1<<20), "binary-MiB")
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
