package kubelettest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
	"github.com/sandbox-gpu/sandbox-gpu/vfio/vfiotest"
)

// BuildBinary builds the main package in the current directory (a cmd/
// folder) into a temporary folder and returns its path.
func BuildBinary(tb testing.TB) string {
	tb.Helper()
	return testutil.BuildBinary(tb, ".", "CGO_ENABLED=0")
}

// RSS returns a process's resident set size in bytes from /proc.
func RSS(pid int) (int64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// BenchmarkRSS runs the plugin binary built from the current directory
// on the simulated host fixture (every NVIDIA function on vfio-pci; its
// roots and --device-plugin-dir are added to args) until it has registered
// resource with a stub kubelet, reports its resident memory as RSS-MiB,
// and checks it exits 0 on SIGTERM.
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
		cmd := exec.Command(bin, append(append([]string{"--device-plugin-dir", dir}, roots...), args...)...)
		var logs bytes.Buffer
		cmd.Stderr = &logs
		b.Cleanup(func() {
			if b.Failed() {
				b.Logf("plugin log:\n%s", logs.String())
			}
		})
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := stub.WaitRegistered(ctx, resource, 1)
		cancel()
		if err != nil {
			_ = cmd.Process.Kill()
			b.Fatal(err)
		}
		rss, err := RSS(cmd.Process.Pid)
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
