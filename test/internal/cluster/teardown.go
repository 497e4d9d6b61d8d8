package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/mountinfo"
)

// criCleanupWithin bounds the removal of the pods through CRI at teardown.
const criCleanupWithin = 60 * time.Second

// Stop tears the cluster down and restores the host, even after a failed test: the controllers stop
// first (nothing is recreated), then the kubelet, then every pod is removed through CRI (runc
// containers killed, CNI torn down), then containerd, whatever it left (shims, processes in the
// kubepods cgroups), the node's namespace, kube-apiserver and etcd, and the webhook servers of the
// test process (ServePodMutator). Then the kernel tunables,
// cgroups, iptables chains, bridge and folders the host did not have before are restored, and the
// work folder is removed (the logs stay when Options.LogsDir is set). Safe to call more than once.
func (c *Cluster) Stop(ctx context.Context) error {
	if c.stopped {
		return c.stopErr
	}
	c.stopped = true
	start := time.Now()
	var errs []error
	stop := func(names ...string) {
		for _, n := range names {
			for _, p := range c.procs {
				if p.name == n {
					t := time.Now()
					if err := p.stop(stopGrace); err != nil {
						errs = append(errs, err)
					}
					c.logf("%s stopped in %v", n, time.Since(t).Round(time.Millisecond))
				}
			}
		}
	}
	stop("kube-controller-manager", "kube-scheduler")
	stop("kubelet")
	if err := c.removePods(ctx); err != nil {
		errs = append(errs, err)
	}
	if c.criConn != nil {
		_ = c.criConn.Close()
	}
	stop("containerd", "node-namespace")
	stop("kube-apiserver", "etcd")
	for _, srv := range c.servers { // nothing calls them now
		if err := srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cluster: close a webhook server: %w", err))
		}
	}
	for _, p := range c.procs { // anything not named above
		if err := p.stop(stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	if c.dir != "" {
		// The shims containerd started (and anything they started) inherit the marker.
		for _, k := range killMarked(c.dir) {
			c.logf("cleanup: killed %s (left by containerd)", k)
		}
	}
	if c.before != nil {
		if err := restoreHost(c.before, c.opts.Bridge, c.logf); err != nil {
			errs = append(errs, fmt.Errorf("cluster: restore the host: %w", err))
		}
	}
	if c.dir != "" {
		_ = mountinfo.UnmountUnder(c.dir, false)
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("cluster: remove the work folder: %w", err))
		}
	}
	if len(errs) == 0 && c.before != nil {
		if err := removeState(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.lock != nil {
		_ = c.lock.Close() // releases the flock
	}
	c.stopErr = errors.Join(errs...)
	c.logf("cluster torn down in %v", time.Since(start).Round(time.Millisecond))
	return c.stopErr
}

// VerifyHostRestored compares the host with the snapshot taken before the cluster started; after
// Stop it must find no difference.
func (c *Cluster) VerifyHostRestored() error {
	if c.before == nil {
		return errors.New("cluster: no snapshot was taken")
	}
	now, err := TakeHostSnapshot()
	if err != nil {
		return err
	}
	if d := c.before.Diff(now, c.opts.Bridge); len(d) > 0 {
		return fmt.Errorf("cluster: the host differs from before the cluster started:\n  %s", joinLines(d))
	}
	return nil
}

// removePods stops and removes every pod sandbox through CRI while containerd still runs: runc
// kills the containers, the CNI plugins release the addresses and veths.
func (c *Cluster) removePods(ctx context.Context) error {
	if c.cri == nil || !c.running("containerd") {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, criCleanupWithin)
	defer cancel()
	pods, err := c.cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("containerd: list pods at teardown: %w", err)
	}
	var errs []error
	for _, p := range pods.GetItems() {
		name := p.GetMetadata().GetNamespace() + "/" + p.GetMetadata().GetName()
		if _, err := c.cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("containerd: stop pod %s: %w", name, err))
			continue
		}
		if _, err := c.cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("containerd: remove pod %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// running reports whether the named component runs.
func (c *Cluster) running(name string) bool {
	for _, p := range c.procs {
		if p.name == name && !p.Exited() {
			return true
		}
	}
	return false
}

// killMarked SIGKILLs every process that carries the marker of the cluster in dir in its
// environment (every component, and the shims containerd started, which inherit it), and waits
// until they are gone.
func killMarked(dir string) []string {
	var killed []string
	var pids []int
	scan := func() []int {
		var found []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err == nil && pid != os.Getpid() && hasMarker(pid, dir) {
				found = append(found, pid)
			}
		}
		return found
	}
	pids = scan()
	for _, pid := range pids {
		comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		_ = syscall.Kill(pid, syscall.SIGKILL)
		killed = append(killed, fmt.Sprintf("%s (pid %d)", trimNewline(string(comm)), pid))
	}
	if len(pids) > 0 {
		// SIGKILL is not instant: wait until they are gone (zombies of ours are reaped by Wait).
		_ = poll(context.Background(), 10*time.Second, func(context.Context) (bool, error) {
			for _, pid := range scan() {
				if state, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); !isZombie(state) {
					return false, nil
				}
			}
			return true, nil
		})
	}
	return killed
}
