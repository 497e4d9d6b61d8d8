package containerd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/containerdconf"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/mountinfo"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kataHandler is a second runtime handler, named like the Kata runtime class the operator expects,
// but running runc underneath so that its pods run here: the plugin must leave such pods alone.
const kataHandler = "kata-qemu-nvidia-gpu"

// daemon is a real containerd with its own root, state, sockets and CDI folder under one short
// temporary folder, and a CRI client. It can be stopped and started again on the same folders.
type daemon struct {
	env         hostEnv
	dir         string
	snapshotter string // overlayfs where the folder's filesystem supports it, else native
	runs        []*daemonRun
	conn        *grpc.ClientConn
	rt          runtimeapi.RuntimeServiceClient
	img         runtimeapi.ImageServiceClient
	pods        int // a counter for unique pod names and UIDs
}

// daemonRun is one containerd process.
type daemonRun struct {
	*proc.Proc
	log   *e2e.SyncBuffer
	start time.Time
}

// Paths inside the daemon's folder.
func (d *daemon) path(elem ...string) string {
	return filepath.Join(append([]string{d.dir}, elem...)...)
}
func (d *daemon) socket() string    { return d.path("c.sock") }
func (d *daemon) nriSocket() string { return d.path("nri.sock") }
func (d *daemon) cdiDir() string    { return d.path("cdi") }

// kataCDIDir is the Kata plugin's own CDI folder, listed first in cdi_spec_dirs (README).
func (d *daemon) kataCDIDir() string { return d.path("kata-cdi") }
func (d *daemon) runcRoot() string   { return d.path("runc") }

// startDaemon starts containerd, imports the busybox image and waits until CRI answers; everything
// it made is removed after the test, and containerd's log is shown when the test failed.
func startDaemon(t *testing.T, env hostEnv) *daemon {
	t.Helper()
	d := &daemon{env: env, dir: shortDir(t, "ctrd")}
	t.Cleanup(func() { d.cleanup(t) })
	for _, sub := range []string{"cdi", "kata-cdi", "dev", "logs", "opt", "cni", "nri-plugins", "nri-conf", "s"} {
		require.NoError(t, os.MkdirAll(d.path(sub), 0o755))
	}
	d.snapshotter = containerdconf.ProbeSnapshotter(d.path("overlay-probe"))
	require.NoError(t, os.WriteFile(d.path("config.toml"), []byte(d.config()), 0o644))
	start := time.Now()
	d.start(t)
	ready := time.Since(start)
	d.importImage(t)
	t.Logf("containerd ready in %v (snapshotter %s), image imported in %v, folder %s",
		ready.Round(time.Millisecond), d.snapshotter, (time.Since(start) - ready).Round(time.Millisecond), d.dir)
	return d
}

// config is containerd's configuration: everything under the daemon's folder, NRI on, the CDI
// folders of the test (the Kata plugin's first, NVIDIA's spec's second), runc and a Kata-named runc runtime, the local busybox as the sandbox image.
func (d *daemon) config() string {
	return containerdconf.Config{
		Dir:          d.dir,
		Address:      d.socket(),
		NRISocket:    d.nriSocket(),
		Snapshotter:  d.snapshotter,
		SandboxImage: imageName,
		CDISpecDirs:  []string{d.kataCDIDir(), d.cdiDir()},
		CNIBinDir:    d.path("cni"),
		CNIConfDir:   d.path("cni"),
		Runc:         runcPath,
		Handlers:     []string{"runc", kataHandler},
	}.String()
}

// current is the containerd process started last.
func (d *daemon) current() *daemonRun {
	if len(d.runs) == 0 {
		return nil
	}
	return d.runs[len(d.runs)-1]
}

// running tells whether the last containerd started is still running.
func (d *daemon) running() bool {
	r := d.current()
	if r == nil {
		return false
	}
	return !r.Exited()
}

// start runs containerd on the daemon's folder and waits until CRI reports the runtime ready.
func (d *daemon) start(t *testing.T) {
	t.Helper()
	require.False(t, d.running(), "containerd is already running")
	r := &daemonRun{log: &e2e.SyncBuffer{}, start: time.Now()}
	cmd := exec.Command(filepath.Join(d.env.binDir, "containerd"), "--config", d.path("config.toml"))
	// containerd finds containerd-shim-runc-v2 on its PATH.
	cmd.Env = append(os.Environ(), "PATH="+d.env.binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = r.log, r.log
	var err error
	r.Proc, err = proc.Start(cmd)
	require.NoError(t, err, "start containerd")
	d.runs = append(d.runs, r)

	if d.conn != nil {
		_ = d.conn.Close()
	}
	// A short reconnect backoff: the socket appears a moment after the process starts.
	conn, err := grpc.NewClient("unix://"+d.socket(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	require.NoError(t, err, "CRI client")
	d.conn, d.rt, d.img = conn, runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)

	var last string
	err = e2e.Poll(readyWithin, func() bool {
		select {
		case <-r.Done():
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		st, err := d.rt.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			last = err.Error()
			return false
		}
		for _, c := range st.GetStatus().GetConditions() {
			if c.GetType() == runtimeapi.RuntimeReady && c.GetStatus() {
				return true
			}
		}
		last = fmt.Sprint(st.GetStatus().GetConditions())
		return false
	})
	select {
	case <-r.Done():
		t.Fatalf("containerd exited while starting: %v\n%s", r.Err(), r.log.String())
	default:
	}
	require.NoError(t, err, "containerd not ready (last answer: %s)", last)
}

// stop sends SIGTERM to containerd and waits for it to exit; its shims and containers go on running.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	r := d.current()
	if r == nil || !d.running() {
		return
	}
	_ = r.Cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(exitWithin)
	defer timer.Stop()
	select {
	case <-r.Done():
	case <-timer.C:
		t.Errorf("containerd (pid %d) did not exit within %v of SIGTERM; killing it", r.Cmd.Process.Pid, exitWithin)
		_ = syscall.Kill(-r.Cmd.Process.Pid, syscall.SIGKILL)
		<-r.Done()
	}
	if d.conn != nil {
		_ = d.conn.Close()
		d.conn = nil
	}
}

// restart stops containerd and starts it again on the same folders.
func (d *daemon) restart(t *testing.T) {
	t.Helper()
	d.stop(t)
	start := time.Now()
	d.start(t)
	t.Logf("containerd restarted, ready in %v", time.Since(start).Round(time.Millisecond))
}

// importImage imports the busybox image with ctr into the CRI namespace and waits until CRI sees it.
func (d *daemon) importImage(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callWithin)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(d.env.binDir, "ctr"), "--address", d.socket(), "--namespace", "k8s.io",
		"images", "import", "--snapshotter", d.snapshotter, d.env.image)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "ctr images import %s:\n%s", d.env.image, out)
	var last error
	err = e2e.Poll(readyWithin, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		st, err := d.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: imageName}})
		last = err
		return err == nil && st.GetImage() != nil
	})
	require.NoError(t, err, "CRI does not see %s after ctr import (%v):\n%s", imageName, last, out)
}

// cleanup removes every pod through CRI, stops containerd, deletes what runc still has, unmounts
// what is left under the folder and removes it.
func (d *daemon) cleanup(t *testing.T) {
	if d.running() {
		ctx, cancel := context.WithTimeout(context.Background(), callWithin)
		pods, err := d.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			t.Errorf("list pods at cleanup: %v", err)
		}
		for _, p := range pods.GetItems() {
			if _, err := d.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
				t.Errorf("stop pod %s at cleanup: %v", p.GetMetadata().GetName(), err)
			}
			if _, err := d.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
				t.Errorf("remove pod %s at cleanup: %v", p.GetMetadata().GetName(), err)
			}
		}
		cancel()
		d.stop(t)
	}
	if t.Failed() {
		for i, r := range d.runs {
			log := r.log.String()
			if len(log) > 64<<10 {
				log = "...\n" + log[len(log)-64<<10:]
			}
			t.Logf("containerd run %d (started %s, exit %v) log:\n%s", i+1, r.start.Format(time.TimeOnly), r.Err(), log)
		}
	}
	d.killLeftovers(t)
	if err := mountinfo.UnmountUnder(d.dir, false); err != nil {
		t.Error(err)
	}
	if err := os.RemoveAll(d.dir); err != nil {
		t.Errorf("remove %s: %v", d.dir, err)
	}
}

// killLeftovers deletes the containers runc still knows under the daemon's runc root and kills the
// shims of this daemon (their -address is the daemon's socket): nothing is left when CRI cleaned up.
func (d *daemon) killLeftovers(t *testing.T) {
	namespaces, _ := os.ReadDir(d.runcRoot())
	for _, ns := range namespaces {
		root := filepath.Join(d.runcRoot(), ns.Name())
		out, err := exec.Command(runcPath, "--root", root, "list", "-q").Output()
		if err != nil {
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			t.Logf("cleanup: runc delete --force %s (left by containerd)", id)
			if out, err := exec.Command(runcPath, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
				t.Errorf("runc delete --force %s: %v\n%s", id, err, out)
			}
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "containerd-shim-runc-v2" && slices.Contains(args, d.socket()) {
			t.Logf("cleanup: killing shim pid %d (left by containerd)", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
