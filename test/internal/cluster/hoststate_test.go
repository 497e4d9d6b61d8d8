package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHostSnapshotDiff(t *testing.T) {
	before := &HostSnapshot{
		Sysctls: map[string]string{"kernel.panic": "1", "vm.overcommit_memory": "0"},
		Paths:   map[string]bool{"/var/lib/kubelet": false},
		Links:   []string{"eth0", "lo"},
	}
	after := &HostSnapshot{
		Sysctls: map[string]string{"kernel.panic": "10", "vm.overcommit_memory": "0"},
		Paths:   map[string]bool{"/var/lib/kubelet": true},
		Cgroups: []string{"/sys/fs/cgroup/memory/kubepods"},
		Links:   []string{"eth0", "lo", "sgpu0", "tap0", "veth1234"},
	}
	assert.Equal(t, []string{
		`sysctl kernel.panic: "10", was "1"`,
		"path /var/lib/kubelet: exists=true, was false",
		"cgroup /sys/fs/cgroup/memory/kubepods left behind",
		"network interface sgpu0 left behind",
		"network interface veth1234 left behind",
	}, before.Diff(after, "sgpu0"), "tap0 is somebody else's")
	assert.Empty(t, before.Diff(before, "sgpu0"))
}

func TestHostPath(t *testing.T) {
	c := &Cluster{dir: "/tmp/sgc1"}
	assert.Equal(t, "/tmp/sgc1/var-lib/kubelet/device-plugins", c.DevicePluginDir())
	assert.Equal(t, "/tmp/sgc1/var-log/containers", c.HostPath("/var/log/containers"))
	assert.Equal(t, "/tmp/sgc1/var-lib", c.HostPath("/var/lib"))
	assert.Equal(t, "/var/library", c.HostPath("/var/library"))
	assert.Equal(t, "/dev/vfio/1", c.HostPath("/dev/vfio/1"))
	assert.Equal(t, "/tmp/sgc1/run-nri/nri.sock", c.NRISocket())
	assert.Equal(t, "/tmp/sgc1/run-cdi", c.CDIDir())
	assert.Equal(t, "/tmp/sgc1/run-sandbox-gpu/vfio-manager/vfio-manager.ready", c.HostPath("/var/run/sandbox-gpu/vfio-manager/vfio-manager.ready"))
	assert.Equal(t, "/tmp/sgc1/etc-cdi", c.HostPath("/etc/cdi/"))
	assert.Equal(t, "/run/other", c.HostPath("/run/other"))
}
