// Package cluster starts and tears down a one-node Kubernetes cluster of real parts for end-to-end
// tests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback, containerd
// 2.x with runc and the bridge CNI, and a kubelet, all built or installed by hack/fetch-cluster.sh
// (FindAssets says what is missing and how to get it).
//
// Every component has its own ports and its own files under one short work folder and writes its
// own pid file. containerd and the kubelet run in a private mount namespace (NodeNamespace) in
// which folders of the work folder are mounted over /var/lib, /var/log, /run/sandbox-gpu, /run/nri,
// /run/cdi and /etc/cdi (nodedirs.go), so the kubelet's fixed paths (the device-plugin socket
// /var/lib/kubelet/device-plugins/kubelet.sock, /var/log/containers), /var/lib/cni, containerd's
// NRI socket and CDI folders and what operands share through hostPath volumes are the work
// folder's; HostPath translates a node path to the host's. Paths handed to pods (hostPath volumes,
// simulated device trees) must not lie under those folders unless they are meant to be the node's.
// Mounts made in NodeNamespace later (a simulated sysfs, test/internal/simnode) reach every
// container started after them, and nothing on the host.
//
// Stop kills every process the cluster started and restores what the kubelet and the CNI plugins
// change on the host (kernel tunables, kubepods cgroups, iptables chains, the bridge, the kubelet's
// folders), from a snapshot taken before anything started; VerifyHostRestored compares. One cluster
// runs on a host at a time (a lock under /run), and a cluster left behind by a crashed test binary is
// torn down by the next Start from the state file it left there.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Options shape a cluster; the zero value is a working one-node cluster.
type Options struct {
	NodeName         string            // default "sandbox-gpu-node"
	NodeLabels       map[string]string // set by the kubelet at registration (within NodeRestriction's rules)
	Images           []string          // OCI or Docker archives imported into containerd after the busybox image
	RuncHandlers     []string          // more CRI runtime handlers, each runc (stand-ins, such as a Kata handler's name)
	ContainerdConfig string            // TOML appended to containerd's config
	LogsDir          string            // where the components' logs go and stay; default: the work folder (removed by Stop)
	Bridge           string            // the CNI bridge; default "sgpu0"
	PodSubnet        string            // the pods' addresses; default "10.244.0.0/24"
	LockWait         time.Duration     // how long Start waits for another cluster on this host; default 10 min
	Logf             func(format string, args ...any)
}

// Cluster is a running one-node cluster.
type Cluster struct {
	Kubeconfig string               // the admin's (system:masters) kubeconfig
	RESTConfig *rest.Config         // the admin's
	Client     kubernetes.Interface // the admin's

	opts    Options
	assets  *Assets
	dir     string
	logsDir string
	pki     *pki
	ports   struct{ etcdClient, etcdPeer, apiServer, controller, scheduler, kubelet, kubeletHealthz int }
	procs   []*process     // in start order
	servers []*http.Server // served by the test process for the kube-apiserver (ServePodMutator)
	before  *HostSnapshot
	lock    *os.File

	nodeIP      net.IP // the default route's address (the kubelet's InternalIP); nil without one
	nodeNSPid   int
	snapshotter string
	criConn     *grpc.ClientConn
	cri         runtimeapi.RuntimeServiceClient
	stopped     bool
	stopErr     error
}

// Start brings the cluster up, in order, each part waited for with a deadline: etcd, kube-apiserver
// (and the kubernetes Service's route), kube-controller-manager and kube-scheduler, the node's mount namespace, containerd (images
// imported), the kubelet (Node Ready). On failure everything started is torn down again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	opts = withDefaults(opts)
	assets, err := FindAssets()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, &MissingError{Missing: []string{"root: a kubelet and containerd need it (run make test as root)"}}
	}
	c := &Cluster{opts: opts, assets: assets}
	start := time.Now()
	if err := c.prepare(ctx); err != nil {
		return nil, errors.Join(err, c.Stop(context.Background()))
	}
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"kubernetes Service", c.routeKubernetesService},
		{"controllers", c.startControllers},
		{"node namespace", c.startNodeNamespace},
		{"containerd", c.startContainerd},
		{"kubelet", c.startKubelet},
	}
	for _, s := range steps {
		if err := s.run(ctx); err != nil {
			return nil, errors.Join(fmt.Errorf("cluster: start %s: %w", s.name, err), c.Stop(context.Background()))
		}
	}
	c.logf("cluster up in %v (work folder %s, logs %s)", time.Since(start).Round(time.Millisecond), c.dir, c.logsDir)
	return c, nil
}

func withDefaults(o Options) Options {
	if o.NodeName == "" {
		o.NodeName = "sandbox-gpu-node"
	}
	if o.Bridge == "" {
		o.Bridge = "sgpu0"
	}
	if o.PodSubnet == "" {
		o.PodSubnet = "10.244.0.0/24"
	}
	if o.LockWait == 0 {
		o.LockWait = 10 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// prepare takes the host lock, tears down what a crashed run left, snapshots the host, and makes
// the work folder, the certificates and the ports.
func (c *Cluster) prepare(ctx context.Context) error {
	var err error
	if c.lock, err = lockHost(ctx, c.opts.LockWait); err != nil {
		return err
	}
	if err := recoverCrashedRun(c.logf); err != nil {
		return err
	}
	if c.before, err = TakeHostSnapshot(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	base := os.TempDir()
	if len(base) > 12 { // unix socket paths under the folder must stay short
		base = "/tmp"
	}
	if c.dir, err = os.MkdirTemp(base, "sgc"); err != nil {
		return fmt.Errorf("cluster: work folder: %w", err)
	}
	if err := writeState(runState{Dir: c.dir, Bridge: c.opts.Bridge, Before: c.before}); err != nil {
		return err
	}
	c.logsDir = c.opts.LogsDir
	if c.logsDir == "" {
		c.logsDir = c.path("logs")
	}
	dirs := []string{c.logsDir, "run", "etcd", "kubeconfigs", "containerd", "cni/net.d", "kubelet/pki",
		"kubelet/volume-plugins", "var-lib/kubelet"}
	for _, d := range nodeDirs {
		dirs = append(dirs, d.work)
	}
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			d = c.path(d)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	if c.nodeIP, err = defaultRouteIP(); err != nil {
		c.logf("node address: %v", err)
	}
	ports, err := freePorts(7)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	p := &c.ports
	p.etcdClient, p.etcdPeer, p.apiServer, p.controller, p.scheduler, p.kubelet, p.kubeletHealthz =
		ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6]
	c.pki, err = newPKI(c.path("pki"), apiServerIPs(), c.opts.NodeName)
	return err
}

// start runs one component (through prefix, such as nsenter, when given) with env added to the
// test's environment and the cluster's marker (recoverCrashedRun finds its processes by it), and
// remembers it for Stop.
func (c *Cluster) start(name string, env, prefix []string, argv ...string) (*process, error) {
	env = append(append(os.Environ(), env...), dirEnv+"="+c.dir)
	p, err := startProcess(name, c.logsDir, c.path("run"), env, prefix, argv...)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	return p, nil
}

// Paths.

// Dir is the cluster's work folder.
func (c *Cluster) Dir() string { return c.dir }

// LogsDir holds one <component>.log per component.
func (c *Cluster) LogsDir() string { return c.logsDir }

// NodeName is the name of the cluster's only Node.
func (c *Cluster) NodeName() string { return c.opts.NodeName }

// ContainerdSocket is containerd's gRPC (CRI) socket.
func (c *Cluster) ContainerdSocket() string { return c.path("run", "containerd.sock") }

// NRISocket is containerd's NRI socket, for NRI plugins: /var/run/nri/nri.sock on the node (the
// default of NRI plugins), here on the host.
func (c *Cluster) NRISocket() string { return c.HostPath("/var/run/nri/nri.sock") }

// KataCDIDir is the Kata device plugin's own CDI folder on a node (operands.KataCDIDir), which
// containerd lists first in its cdi_spec_dirs.
const KataCDIDir = "/var/lib/sandbox-gpu/kata-cdi"

// CDIDir is the node's /var/run/cdi, one of the two folders (with /etc/cdi) where containerd
// reads CDI specs, here on the host.
func (c *Cluster) CDIDir() string { return c.HostPath("/var/run/cdi") }

// NodeNamespace is the node's mount namespace (a /proc/<pid>/ns/mnt file), where containerd and
// the kubelet run; its mounts are copied into every container's.
func (c *Cluster) NodeNamespace() string { return "/proc/" + strconv.Itoa(c.nodeNSPid) + "/ns/mnt" }

// DevicePluginDir is the kubelet's device-plugin folder (kubelet.sock and the plugins' sockets) on
// the host.
func (c *Cluster) DevicePluginDir() string {
	return c.HostPath(KubeletRootDir + "/device-plugins")
}

// LogTail returns the last n lines of a component's log.
func (c *Cluster) LogTail(component string, n int) string {
	return tailFile(filepath.Join(c.logsDir, component+".log"), n)
}

func (c *Cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.dir}, elem...)...)
}

func (c *Cluster) logf(format string, args ...any) { c.opts.Logf(format, args...) }
