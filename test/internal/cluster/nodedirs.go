package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// nodeDir is a folder of the node that, in the node's mount namespace, is a folder of the work
// folder mounted over the host's.
type nodeDir struct {
	node string // the node's path
	work string // the folder in the work folder
}

// nodeDirs are the node's folders the harness makes the work folder's: the kubelet's /var/lib and
// the logs' /var/log (fixed paths: the device-plugin socket, /var/log/containers, /var/lib/cni),
// and the folders the operands share with containerd and with each other through hostPath volumes:
// /run/sandbox-gpu (each writer's folder, names.WriterDir: made by the kubelet for the hostPath
// volumes), /run/nri (containerd's NRI socket),
// /run/cdi and /etc/cdi (CDI specs containerd resolves). /var/run is /run on Debian, and the
// hostPath volumes name /var/run/...: both resolve to these.
var nodeDirs = []nodeDir{
	{"/var/lib", "var-lib"},
	{"/var/log", "var-log"},
	{"/run/sandbox-gpu", "run-sandbox-gpu"},
	{"/run/nri", "run-nri"},
	{"/run/cdi", "run-cdi"},
	{"/etc/cdi", "etc-cdi"},
}

// mountPoints are the nodeDirs the host may lack: Start makes them, empty, as mount points for
// the node's namespace, and Stop removes those it made (they are watched host paths).
var mountPoints = []string{"/run/sandbox-gpu", "/run/nri", "/run/cdi", "/etc/cdi"}

// makeMountPoints makes the missing mount points on the host (empty folders).
func makeMountPoints() error {
	for _, p := range mountPoints {
		if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("node namespace: mount point %s: %w", p, err)
		}
	}
	return nil
}

// HostPath is where a path of the node's mount namespace lies on the host: under a nodeDir
// (/var/lib/..., /var/log/..., /run/sandbox-gpu/..., /run/nri/..., /run/cdi/..., /etc/cdi/...,
// also through /var/run) it is the work folder's; anything else is the same path.
func (c *Cluster) HostPath(nodePath string) string {
	p := filepath.Clean(nodePath)
	if p == "/var/run" || strings.HasPrefix(p, "/var/run/") {
		p = "/run" + strings.TrimPrefix(p, "/var/run")
	}
	for _, d := range nodeDirs {
		if p == d.node || strings.HasPrefix(p, d.node+"/") {
			return c.path(d.work, strings.TrimPrefix(p, d.node))
		}
	}
	return nodePath
}
