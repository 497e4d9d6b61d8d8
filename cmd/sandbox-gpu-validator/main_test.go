package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"
)

// The shipped binary wires the root flags into the host model: pointed at
// a simulated HGX H100 tree it labels its Node with 8 GPUs, and it exits 0
// on SIGTERM. (A separate process: the shell sets klog's global logger,
// which the test's own client would read at the same time.)
func TestDiscoverReadsTheRootsItIsGiven(t *testing.T) {
	cfg := apiserver.Start(t)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "hgx-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k, _ := hostsim.NewHost(t, "hgx-h100")
	o := k.Options()
	bin := testutil.BuildBinary(t, ".")
	p := proc.StartProgram(t, bin, "discover", "--kubeconfig", apiserver.Kubeconfig(t, cfg), "--node-name", "hgx-1",
		"--sysfs-root", o.SysfsRoot, "--dev-root", o.DevRoot, "--proc-root", o.ProcRoot, "--health-addr", "127.0.0.1:0")
	testutil.Eventually(t, 30*time.Second, "hgx-1 labelled with 8 GPUs", func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "hgx-1", metav1.GetOptions{})
		return err == nil && n.Labels[names.GPUPresentLabel] == "true" && n.Labels[names.GPUCountLabel] == "8"
	})
	// The labels show in the API before the agent's patch call has returned and logged: wait
	// for the log line too, or SIGTERM cancels the call in flight (CI saw that once).
	testutil.Eventually(t, 30*time.Second, "the JSON log line of the labelling", func() bool {
		return strings.Contains(p.Out.String(), `"Labelled node"`)
	})
	p.Stop(t, 30*time.Second)
}
