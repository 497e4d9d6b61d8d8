package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/mountinfo"
)

// Host-wide files: one cluster at a time per host (a kubelet's cgroups and kernel tunables are
// host-wide), and the state of the running one, so that a run killed before its teardown (a panic,
// go test's -timeout) is torn down by the next. Under /run: a reboot clears both, and the host state
// with them.
const (
	lockPath  = "/run/sandbox-gpu-cluster.lock"
	statePath = "/run/sandbox-gpu-cluster.json"
	// dirEnv marks every process of a cluster with its work folder.
	dirEnv = "SANDBOX_GPU_CLUSTER_DIR"
)

// runState is what a crashed run leaves for the next one.
type runState struct {
	Dir    string        `json:"dir"`
	Bridge string        `json:"bridge"`
	Before *HostSnapshot `json:"before"`
}

// lockHost takes the host's cluster lock, waiting up to within for another cluster to finish.
func lockHost(ctx context.Context, within time.Duration) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cluster: lock: %w", err)
	}
	err = poll(ctx, within, func(context.Context) (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, retryf("another cluster runs on this host (%s is locked)", lockPath)
		}
		return err == nil, err
	})
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cluster: lock %s: %w", lockPath, err)
	}
	return f, nil
}

func writeState(s runState) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("cluster: state: %w", err)
	}
	tmp := statePath + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("cluster: state: %w", err)
	}
	if err := os.Rename(tmp, statePath); err != nil {
		return fmt.Errorf("cluster: state: %w", err)
	}
	return nil
}

func removeState() error {
	if err := os.Remove(statePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cluster: state: %w", err)
	}
	return nil
}

// recoverCrashedRun tears down the cluster a crashed run left behind (the caller holds the lock, so
// its owner is gone): its processes killed, the host restored from that run's snapshot, its work
// folder removed.
func recoverCrashedRun(logf func(string, ...any)) error {
	data, err := os.ReadFile(statePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster: state: %w", err)
	}
	var s runState
	if err := json.Unmarshal(data, &s); err != nil || s.Dir == "" || s.Before == nil {
		logf("ignoring an unreadable %s (%v)", statePath, err)
		return removeState()
	}
	logf("tearing down the cluster a crashed run left in %s", s.Dir)
	for _, k := range killMarked(s.Dir) {
		logf("cleanup: killed %s", k)
	}
	var errs []error
	if err := restoreHost(s.Before, s.Bridge, logf); err != nil {
		errs = append(errs, err)
	}
	_ = mountinfo.UnmountUnder(s.Dir, false)
	if err := os.RemoveAll(s.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: tear down the crashed run's cluster in %s: %w", s.Dir, err)
	}
	return removeState()
}

// apiServerIPs are the addresses in kube-apiserver's serving certificate: loopback, the kubernetes
// Service's, and the host's own.
func apiServerIPs() []net.IP {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(kubernetesSvcIP)}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

// isZombie reports whether /proc/<pid>/stat says the process is a zombie (or is gone).
func isZombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z'
}

func trimNewline(s string) string { return strings.TrimRight(s, "\n") }

func joinLines(lines []string) string { return strings.Join(lines, "\n  ") }
