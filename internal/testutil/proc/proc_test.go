package proc

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// start starts sh -c script as a Proc, its output in the returned buffer.
func start(t *testing.T, script string) (*Proc, *testutil.SyncBuffer) {
	t.Helper()
	out := &testutil.SyncBuffer{}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdout, cmd.Stderr = out, out
	p, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Terminate(0) })
	return p, out
}

// signalOf is the signal that ended the process, or -1.
func signalOf(err error) syscall.Signal {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
	}
	return -1
}

// A process that exits on SIGTERM is ended by it, not killed.
func TestTerminateSendsTERMFirst(t *testing.T) {
	p, _ := start(t, "exec sleep 600")
	if err := p.Terminate(time.Minute); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() || signalOf(p.Err()) != syscall.SIGTERM {
		t.Errorf("exited %v, err %v: want ended by SIGTERM", p.Exited(), p.Err())
	}
}

// A process that ignores SIGTERM is killed after the grace period, with
// nothing of its group left, and a second Terminate is harmless.
func TestTerminateKillsWhatIgnoresTERM(t *testing.T) {
	p, out := start(t, `trap "" TERM; echo ready; exec sleep 600`)
	testutil.Eventually(t, 10*time.Second, "the shell ignoring SIGTERM", func() bool { return strings.Contains(out.String(), "ready") })
	if err := p.Terminate(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if signalOf(p.Err()) != syscall.SIGKILL {
		t.Errorf("err %v: want killed by SIGKILL", p.Err())
	}
	if err := syscall.Kill(-p.Cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d still there (kill -0: %v)", p.Cmd.Process.Pid, err)
	}
	if err := p.Terminate(time.Minute); err != nil {
		t.Errorf("second Terminate: %v", err)
	}
}

// Err is nil while the process runs and once it exited 0; Done closes.
func TestErrFollowsTheExit(t *testing.T) {
	p, _ := start(t, "exit 0")
	<-p.Done()
	if !p.Exited() || p.Err() != nil {
		t.Errorf("exit 0: exited %v, err %v", p.Exited(), p.Err())
	}
	q, _ := start(t, "exit 3")
	<-q.Done()
	var exit *exec.ExitError
	if !errors.As(q.Err(), &exit) || exit.ExitCode() != 3 {
		t.Errorf("exit 3: err %v", q.Err())
	}
}

func TestRSS(t *testing.T) {
	rss, err := RSS(os.Getpid())
	if err != nil || rss <= 0 {
		t.Errorf("RSS of the test itself: %d, %v", rss, err)
	}
	p, _ := start(t, "exit 0")
	<-p.Done()
	if _, err := RSS(p.Cmd.Process.Pid); err == nil {
		t.Errorf("RSS of pid %d, gone, gave no error", p.Cmd.Process.Pid)
	}
}
