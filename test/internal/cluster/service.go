package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// serviceChain holds the one rule that stands in for kube-proxy: the kubernetes Service's cluster
// IP, DNATed to kube-apiserver on the node's address. Its KUBE- prefix puts it under the host
// restore's iptables cleanup.
const serviceChain = "KUBE-SANDBOX-GPU-SVC"

// routeKubernetesService lets pods reach kube-apiserver the way in-cluster clients do
// (KUBERNETES_SERVICE_HOST=10.96.0.1, port 443): there is no kube-proxy, so one nat rule, jumped to
// from PREROUTING (pods on the bridge) and OUTPUT (host-network pods), sends the Service's address
// to the node's address and kube-apiserver's port.
func (c *Cluster) routeKubernetesService(context.Context) error {
	if c.nodeIP == nil {
		c.logf("no default route: pods cannot reach kube-apiserver through the kubernetes Service")
		return nil
	}
	target := net.JoinHostPort(c.nodeIP.String(), strconv.Itoa(c.ports.apiServer))
	rules := [][]string{
		{"-N", serviceChain},
		{"-A", serviceChain, "-d", kubernetesSvcIP + "/32", "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", target},
		{"-A", "PREROUTING", "-j", serviceChain},
		{"-A", "OUTPUT", "-j", serviceChain},
	}
	for _, r := range rules {
		args := append([]string{"-w", "-t", "nat"}, r...)
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("kubernetes Service: iptables %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	c.logf("kubernetes Service %s:443 -> %s", kubernetesSvcIP, target)
	return nil
}

// defaultRouteIP is the first IPv4 address of the interface of the default route: the address the
// kubelet picks as its node's InternalIP.
func defaultRouteIP() (net.IP, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// Iface Destination Gateway Flags ...; the default route's destination is 00000000.
		if len(fields) < 2 || fields[1] != "00000000" {
			continue
		}
		iface, err := net.InterfaceByName(fields[0])
		if err != nil {
			return nil, err
		}
		addrs, err := iface.Addrs()
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.To4(), nil
			}
		}
	}
	return nil, errors.New("no default route with an IPv4 address")
}
