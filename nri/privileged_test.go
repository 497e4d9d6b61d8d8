package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withSysfs gives a container the /sys mount the runtime makes: read-write
// only for a privileged container.
func withSysfs(c *api.Container, privileged bool) *api.Container {
	opts := []string{"nosuid", "noexec", "nodev", "ro"}
	if privileged {
		opts = []string{"nosuid", "noexec", "nodev", "rw"}
	}
	c.Mounts = append(c.Mounts, &api.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: opts})
	return c
}

// TestPrivilegedManagementPodsKeepEnvAccess: NVIDIA's container stack
// (device plugin, dcgm-exporter, GPU feature discovery) runs privileged
// with NVIDIA_VISIBLE_DEVICES=all and no allocation; the runtime gave it
// every host device. It is left alone, as nvidia-container-toolkit's
// accept-envvar-when-privileged does; an unprivileged container asking the
// same way still gets nothing, and a privileged one with an allocation
// still gets exactly it.
func TestPrivilegedManagementPodsKeepEnvAccess(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	f.kubelet.Allocate("gpu-operator", "dcgm-exporter", "exporter", "cpu")
	mgmt := pod("gpu-operator", "dcgm-exporter", "runc")
	a, err := f.rt.Create(mgmt, withSysfs(ctr("exporter", []string{"NVIDIA_VISIBLE_DEVICES=all"}, "/dev/nvidia0", "/dev/nvidiactl", "/dev/null"), true))
	require.NoError(t, err, "a privileged management container is not refused for the host's GPU nodes")
	assert.Empty(t, env(a), "its NVIDIA_VISIBLE_DEVICES stays")
	added, removed := devicePaths(a)
	assert.Empty(t, added)
	assert.Empty(t, removed)
	assert.Empty(t, denied(a))

	f.kubelet.Allocate("default", "sneaky", "main", "cpu")
	a, err = f.rt.Create(pod("default", "sneaky", "runc"), withSysfs(ctr("main", []string{"NVIDIA_VISIBLE_DEVICES=all"}), false))
	require.NoError(t, err)
	assert.Equal(t, "void", env(a)[VisibleDevicesEnv], "unprivileged: env access voided")

	f.kubelet.Allocate("default", "train", "main", "nvidia.com/gpu", "1")
	a, err = f.rt.Create(pod("default", "train", "runc"), withSysfs(ctr("main", nil, "/dev/nvidia0", "/dev/nvidiactl"), true))
	require.NoError(t, err, "privileged with an allocation: not refused for the runtime's host devices")
	assert.Equal(t, []string{"nvidia.com/gpu=1"}, cdiNames(a))

	strict := newFixture(t, fixtureOpts{strictPrivileged: true})
	strict.kubelet.Allocate("gpu-operator", "dcgm-exporter", "exporter", "cpu")
	_, err = strict.rt.Create(mgmt, withSysfs(ctr("exporter", []string{"NVIDIA_VISIBLE_DEVICES=all"}, "/dev/nvidia0"), true))
	require.ErrorContains(t, err, "holds no GPU", "StrictPrivileged applies the rule to privileged containers too")
}
