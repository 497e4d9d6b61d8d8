package cluster

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

const nodeReadyWithin = 120 * time.Second

// KubeletRootDir is the kubelet's --root-dir as the node sees it. The device-plugin socket is always
// /var/lib/kubelet/device-plugins/kubelet.sock, whatever --root-dir says; in the node's mount
// namespace /var/lib is the work folder's var-lib (HostPath translates).
const KubeletRootDir = "/var/lib/kubelet"

// kubeletConfig is the recipe's KubeletConfiguration: cgroup v1 allowed, cgroupfs, swap allowed, the
// cluster's containerd, its own ports, no read-only port, x509 and webhook authentication and webhook
// authorization, no iptables chains, volume plugins under the work folder, eviction thresholds low
// enough for a busy shared machine.
func (c *Cluster) kubeletConfig() ([]byte, error) {
	endpoint := "unix://" + c.ContainerdSocket()
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		FailCgroupV1:             ptr.To(false),
		CgroupDriver:             "cgroupfs",
		FailSwapOn:               ptr.To(false),
		ContainerRuntimeEndpoint: endpoint,
		ImageServiceEndpoint:     endpoint,
		Address:                  "0.0.0.0",
		Port:                     int32(c.ports.kubelet),
		HealthzPort:              ptr.To(int32(c.ports.kubeletHealthz)),
		HealthzBindAddress:       "127.0.0.1",
		ReadOnlyPort:             0,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: c.pki.caFile()},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:          kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		MakeIPTablesUtilChains: ptr.To(false),
		VolumePluginDir:        c.path("kubelet", "volume-plugins"),
		PodLogsDir:             "/var/log/pods",
		ClusterDomain:          "cluster.local",
		ResolverConfig:         ptr.To("/etc/resolv.conf"),
		RotateCertificates:     false,
		// Node status every 2 s: new device-plugin resources reach the Node's allocatable quickly.
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 2 * time.Second},
		NodeStatusReportFrequency: metav1.Duration{Duration: 10 * time.Second},
		SyncFrequency:             metav1.Duration{Duration: 10 * time.Second},
		FileCheckFrequency:        metav1.Duration{Duration: 10 * time.Second},
		EvictionHard: map[string]string{
			"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%",
		},
		ImageGCHighThresholdPercent: ptr.To(int32(100)),
		ImageGCLowThresholdPercent:  ptr.To(int32(99)),
		ShutdownGracePeriod:         metav1.Duration{},
	}
	data, err := yaml.Marshal(&cfg)
	if err != nil {
		return nil, fmt.Errorf("kubelet: config: %w", err)
	}
	return data, nil
}

// startKubelet runs the kubelet in the node's mount namespace (with containerd) and waits until its
// Node is Ready.
func (c *Cluster) startKubelet(ctx context.Context) error {
	data, err := c.kubeletConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path("kubelet", "config.yaml"), data, 0o644); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	args := []string{c.assets.Kubelet,
		"--config=" + c.path("kubelet", "config.yaml"),
		"--kubeconfig=" + c.componentKubeconfig("kubelet"),
		"--root-dir=" + KubeletRootDir, "--cert-dir=" + c.path("kubelet", "pki"),
		"--hostname-override=" + c.opts.NodeName, "--node-labels=" + nodeLabels(c.opts.NodeLabels),
		"--v=2"}
	if c.nodeIP != nil {
		args = append(args, "--node-ip="+c.nodeIP.String())
	}
	p, err := c.start("kubelet", nil, c.inNodeNamespace(), args...)
	if err != nil {
		return err
	}
	return c.waitHealthy(ctx, p, "Node Ready", nodeReadyWithin, func(ctx context.Context) (bool, error) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, retryf("Node %s: %w", c.opts.NodeName, err)
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return true, nil
				}
				return false, retryf("Node %s Ready=%s: %s", c.opts.NodeName, cond.Status, cond.Message)
			}
		}
		return false, retryf("Node %s has no Ready condition yet", c.opts.NodeName)
	})
}

// nodeLabels formats labels for --node-labels.
func nodeLabels(labels map[string]string) string {
	s := "sandbox-gpu.io/test-cluster=true"
	for k, v := range labels {
		s += "," + k + "=" + v
	}
	return s
}
