package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Deadlines of the bring-up, generous for a loaded 2-core machine; polling returns at once.
const (
	etcdWithin      = 60 * time.Second
	apiServerWithin = 120 * time.Second
	healthzWithin   = 90 * time.Second
	stopGrace       = 10 * time.Second
)

// serviceCIDR is the cluster's service range; its first address is the kubernetes Service's.
const (
	serviceCIDR     = "10.96.0.0/24"
	kubernetesSvcIP = "10.96.0.1"
)

// startEtcd runs etcd on two free loopback ports, without fsync (a test cluster's data is thrown
// away), and waits until it reports healthy.
func (c *Cluster) startEtcd(ctx context.Context) error {
	client, peer := c.url(c.ports.etcdClient, "http"), c.url(c.ports.etcdPeer, "http")
	p, err := c.start("etcd", nil, nil, c.assets.Etcd,
		"--name=default", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=default="+peer, "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	return c.waitHealthy(ctx, p, "healthy", etcdWithin, func(ctx context.Context) (bool, error) {
		body, err := get(ctx, hc, client+"/health")
		if err != nil {
			return false, retryf("%w", err)
		}
		return strings.Contains(body, `"health":"true"`), retryf("%s", body)
	})
}

// startAPIServer runs kube-apiserver with the recipe's flags (Node and RBAC
// authorization, NodeRestriction, privileged pods, service-account tokens signed by the PKI's key,
// client certificates for the kubelet connection) and waits for /readyz; then it builds the admin
// kubeconfig, REST config and clientset.
func (c *Cluster) startAPIServer(ctx context.Context) error {
	k := c.pki
	// Pods reach it on the node's address (routeKubernetesService); without one, loopback only.
	bind, advertise := "127.0.0.1", "127.0.0.1"
	if c.nodeIP != nil {
		bind, advertise = "0.0.0.0", c.nodeIP.String()
	}
	p, err := c.start("kube-apiserver", nil, nil, c.assets.APIServer,
		"--etcd-servers="+c.url(c.ports.etcdClient, "http"),
		"--bind-address="+bind, "--advertise-address="+advertise,
		"--secure-port="+strconv.Itoa(c.ports.apiServer),
		"--tls-cert-file="+k.path("apiserver.crt"), "--tls-private-key-file="+k.path("apiserver.key"),
		"--client-ca-file="+k.caFile(),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+k.saPubFile(), "--service-account-signing-key-file="+k.saKeyFile(),
		"--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--kubelet-client-certificate="+k.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+k.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	server := c.url(c.ports.apiServer, "https")
	c.Kubeconfig = c.path("kubeconfigs", "admin.kubeconfig")
	for file, path := range map[string]string{
		"admin": c.Kubeconfig, "controller-manager": c.componentKubeconfig("controller-manager"),
		"scheduler": c.componentKubeconfig("scheduler"), "kubelet": c.componentKubeconfig("kubelet"),
	} {
		if err := k.writeKubeconfig(path, file, server); err != nil {
			return fmt.Errorf("kube-apiserver: %w", err)
		}
	}
	if c.RESTConfig, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return fmt.Errorf("kube-apiserver: admin config: %w", err)
	}
	c.RESTConfig.QPS, c.RESTConfig.Burst = 50, 100
	if c.Client, err = kubernetes.NewForConfig(c.RESTConfig); err != nil {
		return fmt.Errorf("kube-apiserver: clientset: %w", err)
	}
	return c.waitHealthy(ctx, p, "ready", apiServerWithin, func(ctx context.Context) (bool, error) {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, retryf("/readyz: %w: %s", err, firstLines(string(body), 20))
		}
		return true, nil
	})
}

// startControllers runs kube-controller-manager and kube-scheduler, each with its own client
// certificate and secure port, and waits for both /healthz and for the controllers' first work
// that pods depend on: the default ServiceAccount and the kube-root-ca.crt ConfigMap.
func (c *Cluster) startControllers(ctx context.Context) error {
	kcm := c.componentKubeconfig("controller-manager")
	cm, err := c.start("kube-controller-manager", nil, nil, c.assets.Controller,
		"--kubeconfig="+kcm, "--authentication-kubeconfig="+kcm, "--authorization-kubeconfig="+kcm,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.controller),
		"--leader-elect=false", "--use-service-account-credentials",
		"--service-account-private-key-file="+c.pki.saKeyFile(), "--root-ca-file="+c.pki.caFile(),
		"--cluster-signing-cert-file="+c.pki.caFile(), "--cluster-signing-key-file="+c.pki.path("ca.key"),
		// Its default, /usr/libexec/kubernetes/kubelet-plugins/volume/exec, would be made on the host.
		"--flex-volume-plugin-dir="+c.path("kubelet", "volume-plugins"),
		"--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	sk := c.componentKubeconfig("scheduler")
	sched, err := c.start("kube-scheduler", nil, nil, c.assets.Scheduler,
		"--kubeconfig="+sk, "--authentication-kubeconfig="+sk, "--authorization-kubeconfig="+sk,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.scheduler),
		"--leader-elect=false", "--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	// Their serving certificates are self-signed in memory; only the answer matters here.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a local health check
	}}
	for _, x := range []struct {
		p    *process
		port int
	}{{cm, c.ports.controller}, {sched, c.ports.scheduler}} {
		err := c.waitHealthy(ctx, x.p, "healthy", healthzWithin, func(ctx context.Context) (bool, error) {
			body, err := get(ctx, hc, c.url(x.port, "https")+"/healthz")
			if err != nil {
				return false, retryf("%w", err)
			}
			return body == "ok", retryf("/healthz: %s", body)
		})
		if err != nil {
			return err
		}
	}
	return c.waitHealthy(ctx, cm, "default ServiceAccount and kube-root-ca.crt", healthzWithin, func(ctx context.Context) (bool, error) {
		if _, err := c.Client.CoreV1().ServiceAccounts(corev1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, retryf("ServiceAccount default/default: %w", err)
		}
		if _, err := c.Client.CoreV1().ConfigMaps(corev1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return false, retryf("ConfigMap default/kube-root-ca.crt: %w", err)
		}
		return true, nil
	})
}

// waitHealthy polls cond (what p must reach) until it holds, failing early (with the log's tail) when p exits.
func (c *Cluster) waitHealthy(ctx context.Context, p *process, what string, within time.Duration, cond func(context.Context) (bool, error)) error {
	start := time.Now()
	err := poll(ctx, within, func(ctx context.Context) (bool, error) {
		if err := p.exitError(); err != nil {
			return false, err
		}
		return cond(ctx)
	})
	if err != nil {
		if p.Exited() {
			return err
		}
		return fmt.Errorf("%s: %s not ready: %w; last lines of %s:\n%s", p.name, what, err, p.logPath, tailFile(p.logPath, 30))
	}
	c.logf("%s: %s in %v", p.name, what, time.Since(start).Round(time.Millisecond))
	return nil
}

func (c *Cluster) url(port int, scheme string) string {
	return scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func (c *Cluster) componentKubeconfig(name string) string {
	return c.path("kubeconfigs", name+".kubeconfig")
}

// get returns the body of a GET.
func get(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return strings.TrimSpace(string(body)), err
}

// freePorts returns n distinct free TCP ports (held open together while chosen).
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
