package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/proc"
)

// process is one daemon of the cluster: its own process group, its own log file, and a pid file the
// process writes itself (sh writes $$ and execs the daemon, so the pid is the daemon's, never a
// subshell's).
type process struct {
	*proc.Proc
	name    string
	logPath string
	pidPath string
}

// startProcess runs argv (through prefix, such as nsenter, when given) as component name, with its
// output in logsDir/<name>.log and its pid in runDir/<name>.pid.
func startProcess(name, logsDir, runDir string, env []string, prefix []string, argv ...string) (*process, error) {
	p := &process{
		name:    name,
		logPath: filepath.Join(logsDir, name+".log"),
		pidPath: filepath.Join(runDir, name+".pid"),
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	defer logFile.Close() // the child holds its own copy
	_ = os.Remove(p.pidPath)
	// $0 is the pid file, "$@" the daemon and its arguments.
	args := append(append([]string{}, prefix...), "/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, p.pidPath)
	args = append(args, argv...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, so that stopping it stops whatever it started in the group too; killed
	// with the test binary (SIGKILL when the thread that started it dies).
	if p.Proc, err = proc.Start(cmd); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, argv[0], err)
	}
	return p, nil
}

// exitError describes how the process ended, with the tail of its log; nil while it runs.
func (p *process) exitError() error {
	if !p.Exited() {
		return nil
	}
	return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", p.name, p.Err(), p.logPath, tailFile(p.logPath, 40))
}

// stop sends SIGTERM to the process group and waits up to grace, then SIGKILLs the group. It is
// safe to call more than once.
func (p *process) stop(grace time.Duration) error {
	if p == nil || p.Proc == nil {
		return nil
	}
	if err := p.Terminate(grace); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}

// readPid reads a pid file written by a process of the cluster.
func readPid(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("pid file %s: bad pid %q", path, data)
	}
	return pid, nil
}

// hasMarker reports whether process pid was started by the cluster in dir.
func hasMarker(pid int, dir string) bool {
	environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return false
	}
	return bytes.Contains(append([]byte{0}, environ...), []byte("\x00"+dirEnv+"="+dir+"\x00"))
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
