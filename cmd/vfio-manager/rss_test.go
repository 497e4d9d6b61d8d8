package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin/kubelettest"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	sharedapi "github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
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
	kubeconfig := writeKubeconfig(b, cfg)
	for _, c := range daemonCases() {
		b.Run(c.name, func(b *testing.B) {
			measureDaemon(b, cs, bin, c, func(args []string) *exec.Cmd {
				return exec.Command(bin, append(args, "--kubeconfig", kubeconfig)...)
			})
		})
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

// writeKubeconfig writes cfg (the test API server, client certificates)
// as a kubeconfig file.
func writeKubeconfig(b *testing.B, cfg *rest.Config) string {
	b.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	path := filepath.Join(b.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		b.Fatal(err)
	}
	return path
}

// measureDaemon runs the daemon of c b.N times, each on a fresh simulated
// host and Node, the process built by start from its arguments, and
// reports its RSS once started and once reported, and the binary's size.
// The daemon must exit 0 on SIGTERM.
func measureDaemon(b *testing.B, cs kubernetes.Interface, bin string, c daemonCase, start func(args []string) *exec.Cmd) {
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
		cmd := start(args)
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		fail := func(format string, args ...any) {
			b.Helper()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			b.Fatalf("%s\ndaemon log:\n%s", fmt.Sprintf(format, args...), logs.String())
		}
		rss := func() int64 {
			n, err := kubelettest.RSS(cmd.Process.Pid)
			if err != nil {
				fail("%v", err)
			}
			return n
		}
		if !poll(20*time.Second, func() bool {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				return false
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}) {
			fail("no /healthz on %s within 20s", addr)
		}
		started += rss()
		var last string
		if !poll(30*time.Second, func() bool {
			n, err := nodes.Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false
			}
			last = n.Annotations[c.report]
			return c.done(last)
		}) {
			fail("node %s: no finished report in %s within 30s (last %q)", node, c.report, last)
		}
		reported += rss()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			fail("%v", err)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("the daemon did not exit 0 on SIGTERM: %v\n%s", err, logs.String())
		}
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

// poll calls cond every 50ms until it holds or the timeout passes.
func poll(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
