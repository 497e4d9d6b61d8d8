package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/containerdconf"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	nodeNSWithin    = 20 * time.Second
	containerdReady = 60 * time.Second
	importWithin    = 2 * time.Minute
)

// startNodeNamespace starts the holder of the node's mount namespace: a private (slave) mount
// namespace in which the work folder's nodeDirs are bind-mounted over the node's (/var/lib,
// /var/log, /run/sandbox-gpu, /run/nri, /run/cdi, /etc/cdi; the host's missing mount points are
// made first). containerd and the kubelet enter it, so that the kubelet's fixed paths
// (/var/lib/kubelet/device-plugins/kubelet.sock, /var/log/containers, ...), /var/lib/cni and the
// folders the operands share through hostPath volumes are the work folder's, and the host's stay
// untouched.
func (c *Cluster) startNodeNamespace(ctx context.Context) error {
	if err := makeMountPoints(); err != nil {
		return err
	}
	script := ""
	args := []string{"node-namespace"}
	for i, d := range nodeDirs {
		if err := os.WriteFile(c.path(d.work, ".sandbox-gpu-node"), nil, 0o644); err != nil {
			return fmt.Errorf("node namespace: %w", err)
		}
		script += fmt.Sprintf(`mount --bind "$%d" %s && `, i+1, d.node)
		args = append(args, c.path(d.work))
	}
	script += "exec sleep 2147483647"
	p, err := c.start("node-namespace", nil, []string{"unshare", "--mount", "--propagation", "slave"},
		append([]string{"/bin/sh", "-c", script}, args...)...)
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, p, "mounts made", nodeNSWithin, func(context.Context) (bool, error) {
		pid, err := readPid(p.pidPath)
		if err != nil {
			return false, retryf("pid file: %w", err)
		}
		for _, d := range nodeDirs {
			if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid), "root", d.node, ".sandbox-gpu-node")); err != nil {
				return false, retryf("%s not mounted yet: %w", d.node, err)
			}
		}
		c.nodeNSPid = pid
		return true, nil
	})
}

// inNodeNamespace is the prefix that runs a command in the node's mount namespace.
func (c *Cluster) inNodeNamespace() []string {
	return []string{"nsenter", "--mount=/proc/" + strconv.Itoa(c.nodeNSPid) + "/ns/mnt", "--"}
}

// NodeExec runs a command in the node's mount namespace (where containerd and the kubelet run).
func (c *Cluster) NodeExec(ctx context.Context, argv ...string) ([]byte, error) {
	args := append(c.inNodeNamespace(), argv...)
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("node exec %v: %w: %s", argv, err, out)
	}
	return out, nil
}

// startContainerd writes containerd's config and CNI network, runs it in the node's namespace,
// waits until CRI reports the runtime ready and imports the images.
func (c *Cluster) startContainerd(ctx context.Context) error {
	c.snapshotter = containerdconf.ProbeSnapshotter(c.path("overlay-probe"))
	if err := os.WriteFile(c.path("containerd", "config.toml"), []byte(c.containerdConfig()), 0o644); err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	if err := os.WriteFile(c.path("cni", "net.d", "10-sandbox-gpu.conflist"), []byte(c.cniConfig()), 0o644); err != nil {
		return fmt.Errorf("containerd: CNI config: %w", err)
	}
	// containerd finds containerd-shim-runc-v2 on its PATH.
	env := []string{"PATH=" + c.assets.ContainerdBin + ":" + os.Getenv("PATH")}
	p, err := c.start("containerd", env, c.inNodeNamespace(), c.assets.containerd("containerd"), "--config", c.path("containerd", "config.toml"))
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient("unix://"+c.ContainerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		return fmt.Errorf("containerd: CRI client: %w", err)
	}
	c.criConn, c.cri = conn, runtimeapi.NewRuntimeServiceClient(conn)
	err = c.waitHealthy(ctx, p, "CRI runtime ready", containerdReady, func(ctx context.Context) (bool, error) {
		st, err := c.cri.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			return false, retryf("CRI status: %w", err)
		}
		for _, cond := range st.GetStatus().GetConditions() {
			if cond.GetType() == runtimeapi.RuntimeReady && cond.GetStatus() {
				return true, nil
			}
		}
		return false, retryf("CRI conditions %v", st.GetStatus().GetConditions())
	})
	if err != nil {
		return err
	}
	for _, img := range append([]string{c.assets.BusyboxTar}, c.opts.Images...) {
		if err := c.ImportImage(ctx, img); err != nil {
			return err
		}
	}
	return nil
}

// ImportImage imports an OCI or Docker archive into containerd's k8s.io namespace, where the kubelet
// finds it (pods use imagePullPolicy Never or IfNotPresent: there is no registry).
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	ctx, cancel := context.WithTimeout(ctx, importWithin)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, c.assets.containerd("ctr"), "--address", c.ContainerdSocket(), "--namespace", "k8s.io",
		"images", "import", "--snapshotter", c.snapshotter, tarball)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("containerd: ctr images import %s: %w\n%s", tarball, err, out)
	}
	c.logf("image %s imported in %v", filepath.Base(tarball), time.Since(start).Round(time.Millisecond))
	return nil
}

// SandboxHandlers returns the runtime handlers of the CRI pod sandboxes of a pod (one, unless the
// kubelet has recreated the sandbox), as containerd reports them.
func (c *Cluster) SandboxHandlers(ctx context.Context, namespace, pod string) ([]string, error) {
	resp, err := c.cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.name": pod},
	}})
	if err != nil {
		return nil, fmt.Errorf("containerd: list the sandboxes of %s/%s: %w", namespace, pod, err)
	}
	var out []string
	for _, s := range resp.GetItems() {
		out = append(out, s.GetRuntimeHandler())
	}
	return out, nil
}

// containerdConfig follows the recipe: everything under the work folder, restricted OOM score
// adjustment (the sandbox lacks CAP_SYS_RESOURCE), network namespaces under the state folder, runc
// with cgroupfs (also under the names of opts.RuncHandlers), the bridge CNI from Debian's plugins,
// the local busybox as the pinned pause image, NRI and CDI on with sockets and specs in the work
// folder, and opts.ContainerdConfig appended.
func (c *Cluster) containerdConfig() string {
	return containerdconf.Config{
		Dir:          c.path("containerd"),
		Address:      c.ContainerdSocket(),
		NRISocket:    c.NRISocket(),
		Snapshotter:  c.snapshotter,
		SandboxImage: BusyboxImage,
		// The Kata plugin's own folder first (lowest priority), as the README asks of a node.
		CDISpecDirs:        []string{c.HostPath(KataCDIDir), c.HostPath("/etc/cdi"), c.CDIDir()},
		CNIBinDir:          cniDir,
		CNIConfDir:         c.path("cni", "net.d"),
		Runc:               runcPath,
		Handlers:           append([]string{"runc"}, c.opts.RuncHandlers...),
		NetnsUnderStateDir: true,
		Extra: `
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
` + c.opts.ContainerdConfig + "\n",
	}.String()
}

// cniConfig is a bridge network with host-local addresses; the bridge is the node's gateway.
func (c *Cluster) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "sandbox-gpu",
  "plugins": [{
    "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
`, c.opts.Bridge, c.opts.PodSubnet)
}
