package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"
	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

// buildPlugin builds the binary as deployed (cgo).
func buildPlugin(tb testing.TB) string {
	tb.Helper()
	return testutil.BuildBinary(tb, ".", "CGO_ENABLED=1", "CGO_CFLAGS=-Wno-deprecated-declarations")
}

// BenchmarkRSS runs the plugin binary as deployed (cgo) against NRI's real
// runtime side and a kubelet PodResources stub, injects into 100 pods'
// containers, and reports its resident memory (target under 30 MiB). It
// also checks that SIGTERM ends it with status 0.
func BenchmarkRSS(b *testing.B) {
	bin := buildPlugin(b)
	dir := kubelettest.ShortDir(b)
	cdiDir := b.TempDir()
	nritest.WriteSpec(b, cdiDir, "nvidia", nritest.GPUSpec(8, false))
	kubelet := nritest.StartPodResources(b, dir)
	rt := nritest.StartRuntime(b, dir, "v2.4.2")
	var rss int64
	for n := 0; n < b.N; n++ {
		p := proc.StartProgram(b, bin, "--nri-socket", rt.Socket, "--pod-resources-socket", kubelet.Socket(), "--cdi-dir", cdiDir)
		rt.WaitJoined(b, n+1, 20*time.Second)
		for i := 0; i < 100; i++ {
			name := fmt.Sprintf("job-%d-%d", n, i)
			kubelet.Allocate("ml", name, "main", "nvidia.com/gpu", fmt.Sprint(i%8))
			sb := &api.PodSandbox{Id: "sb-" + name, Name: name, Namespace: "ml", Linux: &api.LinuxPodSandbox{}}
			a, err := rt.Create(sb, &api.Container{Id: "c-" + name, Name: "main", Linux: &api.LinuxContainer{}})
			if err != nil || len(a.GetCDIDevices()) != 1 {
				b.Fatalf("injection: %v %v", a, err)
			}
		}
		r, err := proc.RSS(p.Cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		rss = max(rss, r)
		p.Stop(b, 20*time.Second)
	}
	b.ReportMetric(float64(rss)/(1<<20), "RSS-MiB")
}
