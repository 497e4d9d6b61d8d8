package main

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin/kubelettest"
)

// BenchmarkRSS runs the plugin binary on the simulated HGX host until it
// has registered with a kubelet stub, then reads its resident memory
// (target: at most 20 MiB).
func BenchmarkRSS(b *testing.B) {
	bin := kubelettest.BuildBinary(b)
	for i := 0; i < b.N; i++ {
		dir := kubelettest.ShortDir(b)
		stub := kubelettest.Start(b, dir)
		cmd := exec.Command(bin, "--simulate", "hgx-h100", "--device-plugin-dir", dir, "--permitted-host-devices-file", dir+"/permitted.json")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := stub.WaitRegistered(ctx, "nvidia.com/GH100_H100_SXM5_80GB", 1)
		cancel()
		if err != nil {
			_ = cmd.Process.Kill()
			b.Fatal(err)
		}
		rss, err := kubelettest.RSS(cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rss)/(1<<20), "RSS-MiB")
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("plugin did not exit 0 on SIGTERM: %v", err)
		}
	}
}
