package controllers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin/kubelettest"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// BenchmarkOperatorRSS runs the sandbox-gpu-operator binary against envtest
// with 5,000 GPU nodes and reports its resident memory once every node has
// converged (target: under 150 MiB).
func BenchmarkOperatorRSS(b *testing.B) {
	if skipReason != "" {
		b.Skip(skipReason)
	}
	const nodes = 5000
	c, err := client.New(testCfg, client.Options{Scheme: testScheme})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-gpu"}}
	_ = c.Create(ctx, ns)
	p := &v1alpha1.SandboxGPUPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName}}
	_ = c.Delete(ctx, p)
	p = &v1alpha1.SandboxGPUPolicy{ObjectMeta: metav1.ObjectMeta{Name: PolicyName}, Spec: v1alpha1.SandboxGPUPolicySpec{SandboxWorkloads: sandboxOn("container")}}
	if err := c.Create(ctx, p); err != nil {
		b.Fatal(err)
	}
	configs := []string{"", "container", "vm-passthrough", "vm-vgpu"}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for n := 0; n < nodes; n++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(n int) {
			defer wg.Done()
			defer func() { <-sem }()
			labels := map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"}
			if cfg := configs[n%len(configs)]; cfg != "" {
				labels[workload.ConfigLabel] = cfg
			}
			if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rss-%05d", n), Labels: labels}}); err != nil {
				b.Error(err)
			}
		}(n)
	}
	wg.Wait()

	dir := b.TempDir()
	bin := filepath.Join(dir, "operator")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/sandbox-gpu-operator")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build operator: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: testCfg.Host, CertificateAuthorityData: testCfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: testCfg.CertData, ClientKeyData: testCfg.KeyData, Token: testCfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var logs bytes.Buffer
		cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--leader-elect=false", "--metrics-addr=0", "--health-addr=0")
		cmd.Stderr = &logs
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Minute)
		for {
			var states v1alpha1.SandboxGPUNodeList
			if err := c.List(ctx, &states); err != nil {
				b.Fatal(err)
			}
			done := 0
			for _, st := range states.Items {
				if strings.HasPrefix(st.Name, "rss-") && st.Status.AppliedConfig != "" {
					done++
				}
			}
			if done >= nodes {
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				b.Fatalf("%d of %d nodes converged; operator log:\n%s", done, nodes, logs.String())
			}
			tick := time.NewTimer(500 * time.Millisecond)
			<-tick.C
		}
		b.ReportMetric(time.Since(start).Seconds(), "s-to-converge")
		rss, err := kubelettest.RSS(cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rss)/(1<<20), "RSS-MiB")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
}
