// Package proc is the test kit's one process runner: a program a test or suite starts runs in a
// process group of its own and dies with the test binary (Start, Proc), a program under test has its
// output collected and must exit 0 on SIGTERM (StartProgram, Program.Stop), a daemon is stopped
// with a grace period (Proc.Terminate), and RSS reads a process's resident memory. The product
// module's tests and benchmarks, the demo's and the test module's suites (test/internal/cluster's
// daemons included) start their processes through it.
package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
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

// Terminate sends SIGTERM to the process group, waits up to grace for the process to exit, then
// SIGKILLs whatever is left of the group (the process ignoring SIGTERM, or a child of it) and waits
// for the process. It does not judge how the process ended (Err says); it is safe to call more than
// once.
func (p *Proc) Terminate(grace time.Duration) error {
	pgid := p.Cmd.Process.Pid
	if !p.Exited() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-p.Done():
		case <-timer.C:
		}
	}
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.Done()
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill process group %d: %w", pgid, err)
	}
	return nil
}

// Program is a program under test (a plugin binary) running as a Proc, its stdout and stderr
// collected in Out.
type Program struct {
	*Proc
	Name string // the binary's base name, for messages
	Out  *testutil.SyncBuffer
}

// StartProgram starts bin with args. The test fails if the program is still running at its end
// (it is then killed); its output is logged when the test fails.
func StartProgram(t testing.TB, bin string, args ...string) *Program {
	t.Helper()
	p := &Program{Name: filepath.Base(bin), Out: &testutil.SyncBuffer{}}
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
