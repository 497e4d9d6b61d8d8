package controllers

import (
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"
)

// BenchmarkOperatorRSS runs the sandbox-gpu-operator binary against envtest
// with 5,000 GPU nodes and reports its resident memory once every node has
// converged (target: under 150 MiB).
func BenchmarkOperatorRSS(b *testing.B) {
	if skipReason != "" {
		testutil.MissingPeer(b, "%s", skipReason)
	}
	const nodes = 5000
	c, err := client.New(testCfg, client.Options{Scheme: testScheme})
	if err != nil {
		b.Fatal(err)
	}
	seedCluster(b, c, "rss-", nodes)

	dir := b.TempDir()
	bin := testutil.BuildBinary(b, "../../cmd/sandbox-gpu-operator", "CGO_ENABLED=0")
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
		start := time.Now()
		p := proc.StartProgram(b, bin, "--kubeconfig", kubeconfig, "--leader-elect=false", "--health-addr=")
		waitConverged(b, "rss-", nodes, time.Now().Add(15*time.Minute), func() string {
			return "operator log:\n" + p.Out.String()
		})
		b.ReportMetric(time.Since(start).Seconds(), "s-to-converge")
		rss, err := proc.RSS(p.Cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rss)/(1<<20), "RSS-MiB")
		if err := p.Terminate(30 * time.Second); err != nil {
			b.Fatal(err)
		}
	}
}
