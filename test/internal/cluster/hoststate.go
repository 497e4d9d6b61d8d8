package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/mountinfo"
)

// What a kubelet, containerd and the bridge CNI plugin can change on the host, outside the cluster's
// work folder. The kubelet sets the kernel tunables of setupKernelTunables (vm.overcommit_memory=1,
// kernel.panic=10, kernel.panic_on_oops=1, ...); the bridge plugin sets net.ipv4.ip_forward=1. The
// harness keeps the rest from happening (the kubelet's iptables chains are off, and /var/lib and
// /var/log are the work folder's inside the node's mount namespace), and restores it all anyway.
var (
	watchedSysctls = []string{
		"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
		"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
	}
	// watchedPaths are the kubelet's and the CNI plugins' host folders (the kube-controller-manager
	// makes /usr/libexec/kubernetes/kubelet-plugins/volume/exec unless told another folder), and the
	// mount points of the node's namespace that the harness makes where the host lacks them.
	watchedPaths = append([]string{
		"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni", "/usr/libexec/kubernetes",
	}, mountPoints...)
	// kubeCgroups are the kubelet's top cgroups (cgroupfs driver, cgroup root "/"), in every hierarchy.
	kubeCgroups = []string{"kubepods", "kubepods.slice"}
	// iptablesChainPrefixes are the chains the kubelet (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY,
	// KUBE-FIREWALL) and the CNI plugins (CNI-...) make.
	iptablesChainPrefixes = []string{"KUBE-", "CNI-"}
)

// HostSnapshot is the host state the cluster may change.
type HostSnapshot struct {
	Sysctls  map[string]string                    `json:"sysctls"`
	Paths    map[string]bool                      `json:"paths"`    // watchedPaths: exists
	Cgroups  []string                             `json:"cgroups"`  // existing kubeCgroups folders
	IPTables map[string]map[string]*iptablesTable `json:"iptables"` // family -> table
	Links    []string                             `json:"links"`    // network interfaces
}

// TakeHostSnapshot reads the host state the cluster may change.
func TakeHostSnapshot() (*HostSnapshot, error) {
	s := &HostSnapshot{Sysctls: map[string]string{}, Paths: map[string]bool{}}
	var errs []error
	for _, k := range watchedSysctls {
		v, err := os.ReadFile(sysctlPath(k))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("sysctl %s: %w", k, err))
			}
			continue
		}
		s.Sysctls[k] = strings.TrimSpace(string(v))
	}
	for _, p := range watchedPaths {
		_, err := os.Lstat(p)
		s.Paths[p] = err == nil
	}
	hier, err := cgroupHierarchies()
	if err != nil {
		errs = append(errs, err)
	}
	for _, h := range hier {
		for _, c := range kubeCgroups {
			if _, err := os.Stat(filepath.Join(h, c)); err == nil {
				s.Cgroups = append(s.Cgroups, filepath.Join(h, c))
			}
		}
	}
	if s.IPTables, err = saveIPTables(); err != nil {
		errs = append(errs, err)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		errs = append(errs, fmt.Errorf("network interfaces: %w", err))
	}
	for _, i := range ifaces {
		s.Links = append(s.Links, i.Name)
	}
	slices.Sort(s.Links)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("host snapshot: %w", err)
	}
	return s, nil
}

// Diff lists how now differs from s in what the cluster may change. Network interfaces count only
// when they are the cluster's bridge or veth pairs (others' interfaces may come and go meanwhile).
func (s *HostSnapshot) Diff(now *HostSnapshot, bridge string) []string {
	var d []string
	for _, k := range watchedSysctls {
		if s.Sysctls[k] != now.Sysctls[k] {
			d = append(d, fmt.Sprintf("sysctl %s: %q, was %q", k, now.Sysctls[k], s.Sysctls[k]))
		}
	}
	for _, p := range watchedPaths {
		if s.Paths[p] != now.Paths[p] {
			d = append(d, fmt.Sprintf("path %s: exists=%v, was %v", p, now.Paths[p], s.Paths[p]))
		}
	}
	for _, c := range now.Cgroups {
		if !slices.Contains(s.Cgroups, c) {
			d = append(d, "cgroup "+c+" left behind")
		}
	}
	d = append(d, diffIPTables(s.IPTables, now.IPTables)...)
	for _, l := range now.Links {
		if !slices.Contains(s.Links, l) && (l == bridge || strings.HasPrefix(l, "veth")) {
			d = append(d, "network interface "+l+" left behind")
		}
	}
	return d
}

// restoreHost undoes what the cluster changed since before: kernel tunables written back, the
// kubelet's folders, cgroups (after killing what runs in them), iptables chains and the bridge
// removed. Only what did not exist before is removed.
func restoreHost(before *HostSnapshot, bridge string, logf func(string, ...any)) error {
	var errs []error
	for _, k := range watchedSysctls {
		was, ok := before.Sysctls[k]
		if !ok {
			continue
		}
		now, err := os.ReadFile(sysctlPath(k))
		if err == nil && strings.TrimSpace(string(now)) == was {
			continue
		}
		logf("cleanup: sysctl %s=%s (was changed to %s)", k, was, strings.TrimSpace(string(now)))
		if err := os.WriteFile(sysctlPath(k), []byte(was+"\n"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
		}
	}
	if err := removeKubeCgroups(before.Cgroups, logf); err != nil {
		errs = append(errs, err)
	}
	if err := restoreIPTables(before.IPTables, logf); err != nil {
		errs = append(errs, err)
	}
	if bridge != "" && !slices.Contains(before.Links, bridge) {
		if _, err := net.InterfaceByName(bridge); err == nil {
			logf("cleanup: deleting network interface %s", bridge)
			if out, err := runCommand("ip", "link", "delete", bridge); err != nil {
				errs = append(errs, fmt.Errorf("delete bridge %s: %w: %s", bridge, err, out))
			}
		}
	}
	for _, p := range watchedPaths {
		if was, known := before.Paths[p]; was || !known { // not known: a snapshot of an older harness
			continue
		}
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if slices.Contains(mountPoints, p) {
			// An empty mount point the harness made: anything in it now is somebody else's.
			logf("cleanup: removing the mount point %s", p)
			if err := os.Remove(p); err != nil {
				errs = append(errs, fmt.Errorf("remove the mount point %s: %w", p, err))
			}
			continue
		}
		logf("cleanup: removing %s", p)
		_ = mountinfo.UnmountUnder(p, true)
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

// runCommand runs a host program and returns its combined output.
func runCommand(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
