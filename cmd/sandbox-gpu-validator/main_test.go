package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

func TestHelpListsDiscover(t *testing.T) {
	var out bytes.Buffer
	if code := shell.Run(context.Background(), program(), []string{"--help"}, shell.IO{Stdout: &out}); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	if !strings.Contains(out.String(), "sandbox-gpu-validator discover") {
		t.Errorf("usage lacks the discover command:\n%s", out.String())
	}
	out.Reset()
	if code := shell.Run(context.Background(), program(), []string{"discover", "--help"}, shell.IO{Stdout: &out}); code != 0 {
		t.Fatalf("discover --help exit %d", code)
	}
	for _, f := range []string{"-sysfs-root", "-node-name", "-resync", "-kubeconfig", "-health-addr"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("discover --help lacks %s:\n%s", f, out.String())
		}
	}
}

// kubeconfig writes a kubeconfig file for cfg.
func kubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// The shipped command wires the root flags into the host model: pointed at
// a simulated HGX H100 tree it labels its Node with 8 GPUs, and it exits 0
// on cancellation.
func TestDiscoverReadsTheRootsItIsGiven(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		testutil.MissingPeer(t, "KUBEBUILDER_ASSETS is unset: run `export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -1)` (make test does)")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "hgx-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k, _ := hostsim.NewHost(t, "hgx-h100")
	o := k.Options()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- shell.Run(ctx, program(), []string{"discover", "--kubeconfig", kubeconfig(t, cfg), "--node-name", "hgx-1",
			"--sysfs-root", o.SysfsRoot, "--dev-root", o.DevRoot, "--proc-root", o.ProcRoot, "--health-addr", ""}, shell.IO{Stderr: &stderr})
	}()
	testutil.Eventually(t, 30*time.Second, "hgx-1 labelled with 8 GPUs", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "hgx-1", metav1.GetOptions{})
		return err == nil && n.Labels[names.GPUPresentLabel] == "true" && n.Labels[names.GPUCountLabel] == "8"
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d after cancellation\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("%q", "Labelled node")) {
		t.Errorf("no JSON log line of the labelling:\n%s", stderr.String())
	}
}
