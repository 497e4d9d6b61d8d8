package cluster

import (
	"os"
	"testing"
)

// TestTeardownRestoresHost runs last (go test runs a package's tests in file order): it tears the
// shared cluster down and checks that the host is as the snapshot taken before the cluster started
// says: the kubelet's kernel tunables (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops, ...)
// and the bridge plugin's net.ipv4.ip_forward written back, no kubepods cgroup in any hierarchy, no
// KUBE-/CNI- iptables chain, no bridge or veth left, none of the kubelet's folders
// (/var/lib/kubelet, /var/log/containers, /var/lib/cni, /usr/libexec/kubernetes, ...) on the host.
// Without it (go test -run), TestMain does the same after the tests and fails the run on a
// difference.
func TestTeardownRestoresHost(t *testing.T) {
	requireCluster(t)
	if os.Getenv(holdEnv) == "1" {
		t.Skipf("%s=1: the cluster is held; TestMain tears it down and checks the host afterwards", holdEnv)
	}
	if err := teardown(); err != nil {
		t.Fatal(err)
	}
	assertNoProcessesLeft(t)
}
