package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin/kubelettest"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
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
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "--nri-socket", rt.Socket, "--pod-resources-socket", kubelet.Socket(), "--cdi-dir", cdiDir)
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if b.Failed() {
				b.Logf("plugin stderr:\n%s", stderr.String())
			}
		})
		rt.WaitJoined(b, n+1, 20*time.Second)
		for i := 0; i < 100; i++ {
			name := fmt.Sprintf("job-%d-%d", n, i)
			kubelet.Allocate("ml", name, "main", "nvidia.com/gpu", fmt.Sprint(i%8))
			sb := &api.PodSandbox{Id: "sb-" + name, Name: name, Namespace: "ml", Linux: &api.LinuxPodSandbox{}}
			a, err := rt.Create(sb, &api.Container{Id: "c-" + name, Name: "main", Linux: &api.LinuxContainer{}})
			if err != nil || len(a.GetCDIDevices()) != 1 {
				b.Fatalf("injection: %v %v\n%s", a, err, stderr.String())
			}
		}
		r, err := kubelettest.RSS(cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		rss = max(rss, r)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	}
	b.ReportMetric(float64(rss)/(1<<20), "RSS-MiB")
}
