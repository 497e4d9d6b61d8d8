package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a program started in a process group of its own, which the kernel kills (SIGKILL) when
// the thread that started it dies: what a suite starts does not outlive the test binary.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for
	err  error
}

// Start starts cmd as a Proc (its output goes where cmd says) and waits for it in the background.
func Start(cmd *exec.Cmd) (*Proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has exited and been waited for.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited (and been waited for).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process ended (Wait's error): nil while it runs, and once it exited 0.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Program is a program under test (a plugin binary) running as a Proc, its stdout and stderr
// collected in Out.
type Program struct {
	*Proc
	Name string // the binary's base name, for messages
	Out  *SyncBuffer
}

// StartProgram starts bin with args. The test fails if the program is still running at its end
// (it is then killed); its output is logged when the test fails.
func StartProgram(t testing.TB, bin string, args ...string) *Program {
	t.Helper()
	p := &Program{Name: filepath.Base(bin), Out: &SyncBuffer{}}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	proc, err := Start(cmd)
	if err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p.Proc = proc
	t.Cleanup(func() {
		if !p.Exited() {
			t.Errorf("%s (pid %d) still running at the end of the test; killing it", p.Name, p.Cmd.Process.Pid)
			_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
			<-p.Done()
		}
		if t.Failed() {
			t.Logf("%s %s (exit: %v) output:\n%s", p.Name, strings.Join(args, " "), p.Err(), p.Out.String())
		}
	})
	return p
}

// Stop sends SIGTERM and requires the program to exit 0 within the deadline, leaving no process
// of its group behind.
func (p *Program) Stop(t testing.TB, within time.Duration) {
	t.Helper()
	pid := p.Cmd.Process.Pid
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGTERM %s (pid %d): %v", p.Name, pid, err)
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case <-p.Done():
	case <-timer.C:
		t.Fatalf("%s (pid %d) did not exit within %v of SIGTERM", p.Name, pid, within)
	}
	if err := p.Err(); err != nil {
		t.Errorf("%s (pid %d) on SIGTERM: %v, want exit status 0", p.Name, pid, err)
	}
	// Kill with signal 0 probes the whole process group: ESRCH means nothing of it is left.
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("%s (pid %d) left processes in its group behind (kill -0: %v)", p.Name, pid, err)
	}
}
