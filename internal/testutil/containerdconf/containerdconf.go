// Package containerdconf writes the configuration of the real containerd the suites run (the
// daemon of test/containerd and the node of test/internal/cluster) and picks its snapshotter.
package containerdconf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Config is where a containerd keeps everything and what it runs.
type Config struct {
	// Dir holds containerd's root, state and opt folders, the shims' sockets (s), the runc root of
	// every handler (runc) and NRI's plugin folders (nri-plugins, nri-conf).
	Dir          string
	Address      string // the gRPC (CRI) socket
	NRISocket    string
	Snapshotter  string // from ProbeSnapshotter
	SandboxImage string // the pinned sandbox (pause) image
	CDISpecDirs  []string
	CNIBinDir    string
	CNIConfDir   string
	Runc         string   // runc's binary
	Handlers     []string // the CRI runtime handlers, each runc with cgroupfs; the first is the default
	// NetnsUnderStateDir puts the pods' network namespaces under the state folder (instead of
	// /var/run/netns).
	NetnsUnderStateDir bool
	Extra              string // appended as it is
}

// String is the configuration (version 3). restrict_oom_score_adj is required: the sandbox lacks
// CAP_SYS_RESOURCE, without which RunPodSandbox fails with "can't get final child's PID from pipe:
// EOF".
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, `version = 3
root = '%[1]s/root'
state = '%[1]s/state'
imports = []

[grpc]
  address = '%[2]s'

[plugins.'io.containerd.internal.v1.opt']
  path = '%[1]s/opt'

[plugins.'io.containerd.shim.v1.manager']
  socket_dir = '%[1]s/s'

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '%[3]s'
  plugin_path = '%[1]s/nri-plugins'
  plugin_config_path = '%[1]s/nri-conf'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = '%[4]s'
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '%[5]s'

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
`, c.Dir, c.Address, c.NRISocket, c.Snapshotter, c.SandboxImage)
	if c.NetnsUnderStateDir {
		b.WriteString("  netns_mounts_under_state_dir = true\n")
	}
	fmt.Fprintf(&b, `  enable_cdi = true
  cdi_spec_dirs = [%s]
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ['%s']
  conf_dir = '%s'
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = '%s'
`, quoted(c.CDISpecDirs), c.CNIBinDir, c.CNIConfDir, c.Handlers[0])
	for _, h := range c.Handlers {
		fmt.Fprintf(&b, `[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'%[1]s']
  runtime_type = 'io.containerd.runc.v2'
  sandboxer = 'podsandbox'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'%[1]s'.options]
  BinaryName = '%[2]s'
  Root = '%[3]s/runc'
  SystemdCgroup = false
`, h, c.Runc, c.Dir)
	}
	b.WriteString(c.Extra)
	return b.String()
}

// quoted is a TOML array's elements in literal strings.
func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = "'" + s + "'"
	}
	return strings.Join(q, ", ")
}

// ProbeSnapshotter mounts an overlay in dir: overlayfs when that works, else native.
func ProbeSnapshotter(dir string) string {
	defer os.RemoveAll(dir)
	for _, sub := range []string{"l", "u", "w", "m"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return "native"
		}
	}
	opts := fmt.Sprintf("lowerdir=%s/l,upperdir=%s/u,workdir=%s/w", dir, dir, dir)
	if err := syscall.Mount("overlay", filepath.Join(dir, "m"), "overlay", 0, opts); err != nil {
		return "native"
	}
	_ = syscall.Unmount(filepath.Join(dir, "m"), 0)
	return "overlayfs"
}
