package kubelettest

import (
	"context"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
	"github.com/sandbox-gpu/sandbox-gpu/vfio/vfiotest"
)

// BuildBinary builds the main package in the current directory (a cmd/
// folder) into a temporary folder and returns its path.
func BuildBinary(tb testing.TB) string {
	tb.Helper()
	return testutil.BuildBinary(tb, ".", "CGO_ENABLED=0")
}

// BenchmarkRSS runs the plugin binary built from the current directory
// on the simulated host fixture (every NVIDIA function on vfio-pci; its
// roots and --device-plugin-dir are added to args) until it has registered
// resource with a stub kubelet, reports its resident memory as RSS-MiB,
// and checks it exits 0 on SIGTERM (proc.Program.Stop).
func BenchmarkRSS(b *testing.B, resource, fixture string, args ...string) {
	bin := BuildBinary(b)
	k, h := hostsim.NewHost(b, fixture)
	vfiotest.Move(b, h, vfiotest.AllNVIDIA, vfio.ToVFIO)
	o := k.Options()
	roots := []string{"--sysfs-root", o.SysfsRoot, "--dev-root", o.DevRoot, "--proc-root", o.ProcRoot, "--modules-dir", o.ModulesDir,
		"--wait-vfio-ready=false"}
	for i := 0; i < b.N; i++ {
		dir := ShortDir(b)
		stub := Start(b, dir)
		p := proc.StartProgram(b, bin, append(append([]string{"--device-plugin-dir", dir}, roots...), args...)...)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := stub.WaitRegistered(ctx, resource, 1)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		rss, err := proc.RSS(p.Cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rss)/(1<<20), "RSS-MiB")
		p.Stop(b, 20*time.Second)
	}
}
