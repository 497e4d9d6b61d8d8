package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/simnode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Deadlines of the product's steps on a loaded 2-core machine; each poll returns as soon as its
// state holds.
const (
	systemWithin  = 12 * time.Minute // the whole story
	installWithin = 2 * time.Minute  // helm install to the operator pod Ready
	operandWithin = 3 * time.Minute  // a node label to its operands Ready
	stepWithin    = 2 * time.Minute  // anything else
	gpuAddress    = "0000:3b:00.0"   // the fixture's A10 on NUMA node 0 (a mixed split's container GPU)
	vmGPUAddress  = "0000:af:00.0"   // its A10 on NUMA node 1 (a mixed split's VM GPU)
	a10Resource   = "nvidia.com/GA102GL_A10"
	pgpuResource  = "nvidia.com/pgpu"
)

// TestSandboxGPU is the product on the one-node cluster of real parts, its node a simulated host of
// two A10s whose sysfs the operands write through FUSE (simnode). One node goes through the configs
// in order: the chart installed (the operator Ready, the GPUs found and labelled by the discovery
// agent, the node a container node by default), then the node labelled vm-passthrough in KubeVirt
// mode, then made a mixed node (one GPU for VMs, one for containers), then relabelled container (the
// release returns the GPUs to their host driver before the NRI plugin comes back), then the policy
// switched to Kata with the node vm-passthrough again, then helm uninstall (its pre-delete hook
// returns the GPUs to their host driver, and nothing of the product is left). Each step fails the
// rest.
func TestSandboxGPU(t *testing.T) {
	c, n := requireProduct(t)
	ctx := testContext(t, systemWithin)
	rel, err := newRelease(t, c, "sandbox-gpu", "default")
	require.NoError(t, err)
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		start := time.Now()
		if !t.Run(name, f) {
			t.FailNow()
		}
		if name != "uninstall" {
			r, err := restarts(ctx, c)
			require.NoError(t, err)
			require.Empty(t, r, "after step %s: no container of the product restarted", name)
			require.NoError(t, pollTrue(ctx, stepWithin, func() (bool, error) {
				moved, err := onSimulatedHost(ctx, c, n.Root())
				if err == nil && moved == 0 && name != "install" {
					err = fmt.Errorf("no operand pod on the simulated host")
				}
				return err == nil, err
			}), "after step %s: the operator's DaemonSets are the production ones, their pods on the simulated host", name)
		}
		t.Logf("step %s: %v", name, time.Since(start).Round(time.Millisecond))
	}
	step("install", func(t *testing.T) {
		require.NoError(t, rel.install(ctx, chartValues("kubevirt")))
		_, err := waitPodReady(ctx, c, names.OperandLabel+"=sandbox-gpu-operator", installWithin)
		require.NoError(t, err, "the operator")
	})
	step("discovery", func(t *testing.T) {
		_, err := waitOperandReady(ctx, c, names.GPUDiscovery, operandWithin)
		require.NoError(t, err)
		require.NoError(t, waitNodeLabel(ctx, c, names.GPUPresentLabel, "true", stepWithin), "the discovery agent found the A10")
		require.NoError(t, waitNodeLabel(ctx, c, names.GPUCountLabel, "2", stepWithin))
	})
	step("container", func(t *testing.T) { containerNode(ctx, t, c, n) })
	step("vm-passthrough", func(t *testing.T) { vmPassthrough(ctx, t, c, n) })
	step("mixed", func(t *testing.T) { mixedNode(ctx, t, c, n) })
	step("back to container", func(t *testing.T) { backToContainer(ctx, t, c, n) })
	step("kata", func(t *testing.T) { kataMode(ctx, t, c, n, rel) })
	step("uninstall", func(t *testing.T) {
		if dir := os.Getenv(logsEnv); dir != "" {
			require.NoError(t, savePodLogs(ctx, c, dir), "the product's pod logs into %s", dir)
		}
		require.NoError(t, rel.uninstall())
		require.NoError(t, waitDrivers(ctx, n, stepWithin, map[string]string{gpuAddress: "nvidia", vmGPUAddress: "nvidia"}),
			"helm uninstall returns the A10s to their host driver")
		var left []string
		require.NoError(t, pollTrue(ctx, operandWithin, func() (bool, error) {
			var err error
			left, err = leftovers(ctx, c)
			return err == nil && len(left) == 0, err
		}), "helm uninstall leaves nothing behind; left: %v", left)
	})
}

// chartValues are the release's values: sandbox workloads on in mode, nodes containers by default,
// images never pulled (imported). Nothing in them is about the simulated host: the suite's webhook
// puts the operand pods on it (simulatedHostWebhook).
func chartValues(mode string) map[string]any {
	return map[string]any{
		"operator":         map[string]any{"imagePullPolicy": string(corev1.PullNever)},
		"sandboxWorkloads": map[string]any{"enabled": true, "mode": mode, "defaultWorkload": "container"},
		// NVIDIA's device plugin image cannot be pulled here: the container node's nvidia.com/gpu
		// comes from the suite's stand-in plugin, as where the GPU Operator's container stack runs it.
		"devicePlugin": map[string]any{"enabled": false},
	}
}

// containerNode: on a container node the NRI plugin runs inside the cluster's containerd and gives
// a pod's container exactly the GPU the kubelet allocated it from a stand-in nvidia.com/gpu device
// plugin (as CDI devices of a stand-in GPU spec), and its sidecar, which asks for all GPUs by
// NVIDIA's env variable, none.
func containerNode(ctx context.Context, t *testing.T, c *cluster.Cluster, n *simnode.Node) {
	_, err := waitOperandReady(ctx, c, names.NRIPlugin, operandWithin)
	require.NoError(t, err)
	require.NoError(t, waitNodeStateReady(ctx, c, "container", stepWithin))
	writeGPUSpec(t, c, n)
	plugin := startGPUPlugin(t, c)
	require.NoError(t, waitAllocatable(ctx, c, gpuResource, int64(len(standInGPUs)), stepWithin))

	ns := "gpu-container"
	require.NoError(t, c.CreateNamespace(ctx, ns, namespaceWithin))
	pod := busyboxPod("cuda-job", "exec sleep 2147483647")
	pod.Spec.Containers[0].Name = "cuda"
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpuResource: resource.MustParse("1")}
	sidecar := busyboxPod("", "exec sleep 2147483647").Spec.Containers[0]
	sidecar.Name = "sidecar"
	// It asks for every GPU the way NVIDIA's runtime hooks read it, and must get none.
	sidecar.Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	pod.Spec.Containers = append(pod.Spec.Containers, sidecar)
	_, err = c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.WaitForPod(ctx, ns, pod.Name, podWithin, cluster.PodRunning)
	require.NoError(t, err)

	gpu, err := allocatedGPU(plugin)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{gpu.path: "character special file " + gpu.numbers, "/dev/nvidiactl": "character special file " + ctlNumbers},
		deviceNodes(ctx, t, c, ns, pod.Name, "cuda", "/dev/nvidia*"), "the allocated GPU %s and the spec's common node, nothing else", gpu.id)
	assert.Empty(t, deviceNodes(ctx, t, c, ns, pod.Name, "sidecar", "/dev/nvidia*"), "the sidecar holds no GPU")
	env, _, err := c.Exec(ctx, ns, pod.Name, "sidecar", "/bin/sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES")
	require.NoError(t, err)
	assert.Equal(t, "void", strings.TrimSpace(env), "the NRI plugin voided the sidecar's NVIDIA env request")
	deletePodAndWait(t, c, ns, pod.Name)
}

// vmPassthrough: labelled vm-passthrough, the node runs the VFIO manager, the KubeVirt device plugin
// and the validator; the VFIO manager moves the A10 to vfio-pci through sysfs writes; the real
// kubelet reports the plugin's resource; a pod shaped like KubeVirt's virt-launcher gets the GPU's
// address and its VFIO nodes.
func vmPassthrough(ctx context.Context, t *testing.T, c *cluster.Cluster, n *simnode.Node) {
	setNodeLabel(ctx, t, c, names.WorkloadConfigLabel, ptr.To("vm-passthrough"))
	for _, op := range []string{names.VFIOManager, names.KubeVirtDevicePlugin, names.Validator} {
		_, err := waitOperandReady(ctx, c, op, operandWithin)
		require.NoError(t, err, op)
	}
	require.NoError(t, waitOperandGone(ctx, c, names.NRIPlugin, stepWithin))
	require.NoError(t, waitDrivers(ctx, n, stepWithin, map[string]string{gpuAddress: "vfio-pci", vmGPUAddress: "vfio-pci"}))
	var wrote []string
	for _, w := range n.Kernel.Writes() {
		wrote = append(wrote, w.Path+"="+strings.TrimSpace(w.Data))
	}
	t.Logf("sysfs writes of the VFIO manager's pod through FUSE: %v", wrote)
	require.NoError(t, waitAllocatable(ctx, c, a10Resource, 2, stepWithin))
	require.NoError(t, waitNodeStateReady(ctx, c, "vm-passthrough", stepWithin))
	vmPod(ctx, t, c, n, "vms", gpuAddress, vmGPUAddress)
}

// vmPod runs a pod shaped like KubeVirt's virt-launcher asking for one A10 in a new namespace: it
// gets the address of one of want in PCI_RESOURCE_NVIDIA_COM_GA102GL_A10 and that GPU's VFIO nodes.
func vmPod(ctx context.Context, t *testing.T, c *cluster.Cluster, n *simnode.Node, ns string, want ...string) {
	require.NoError(t, c.CreateNamespace(ctx, ns, namespaceWithin))
	pod := busyboxPod("virt-launcher-testvm-x7k2p", "exec sleep 2147483647")
	pod.Labels = map[string]string{"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "testvm"}
	pod.Spec.Containers[0].Name = "compute"
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{a10Resource: resource.MustParse("1")}
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.WaitForPod(ctx, ns, pod.Name, podWithin, cluster.PodRunning)
	require.NoError(t, err)
	env, _, err := c.Exec(ctx, ns, pod.Name, "compute", "/bin/sh", "-c", "echo $PCI_RESOURCE_NVIDIA_COM_GA102GL_A10")
	require.NoError(t, err)
	got := strings.TrimSpace(env)
	require.Contains(t, want, got, "PCI_RESOURCE_NVIDIA_COM_GA102GL_A10")
	assert.Equal(t, vfioNodes(iommuGroup(t, n, got)), deviceNodes(ctx, t, c, ns, pod.Name, "compute", "/dev/vfio/*"),
		"the group node and the VFIO container node, as the simulated host's character devices")
	deletePodAndWait(t, c, ns, pod.Name)
}

// backToContainer: relabelled container (and the split's annotation gone), the node's VM operands
// stop, the VFIO manager's release DaemonSet returns the VM's A10 to its host driver, and the NRI
// plugin runs; the kubelet's allocatable for the A10 drops to zero.
func backToContainer(ctx context.Context, t *testing.T, c *cluster.Cluster, n *simnode.Node) {
	setNodeLabel(ctx, t, c, names.WorkloadConfigLabel, ptr.To("container"))
	setNodeAnnotation(ctx, t, c, names.VMGPUsAnnotation, nil)
	require.NoError(t, waitDrivers(ctx, n, operandWithin, map[string]string{gpuAddress: "nvidia", vmGPUAddress: "nvidia"}),
		"the release returns the A10s to nvidia")
	_, err := waitOperandReady(ctx, c, names.NRIPlugin, operandWithin)
	require.NoError(t, err)
	for _, op := range []string{names.VFIOManager, names.ReleaseOperand(names.VFIOManager), names.KubeVirtDevicePlugin, names.Validator} {
		require.NoError(t, waitOperandGone(ctx, c, op, stepWithin), op)
	}
	require.NoError(t, waitNodeStateReady(ctx, c, "container", stepWithin))
	require.NoError(t, waitAllocatable(ctx, c, a10Resource, 0, stepWithin))
}

// kataMode: the policy switched to Kata (helm upgrade) and the node labelled vm-passthrough again
// run the Kata plugin instead of the KubeVirt plugin; it writes its CDI spec where containerd reads
// specs, and a pod of the Kata runtime class asking for nvidia.com/pgpu gets the VFIO nodes through
// containerd's CDI resolution of that spec.
func kataMode(ctx context.Context, t *testing.T, c *cluster.Cluster, n *simnode.Node, rel *release) {
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: kataHandler}, Handler: kataHandler}
	_, err := c.Client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callWithin)
		defer cancel()
		assert.NoError(t, c.Client.NodeV1().RuntimeClasses().Delete(ctx, rc.Name, metav1.DeleteOptions{}), "delete RuntimeClass %s", rc.Name)
	})
	require.NoError(t, rel.upgrade(ctx, chartValues("kata")))
	setNodeLabel(ctx, t, c, names.WorkloadConfigLabel, ptr.To("vm-passthrough"))
	_, err = waitOperandReady(ctx, c, names.KataDevicePlugin, operandWithin)
	require.NoError(t, err)
	require.NoError(t, waitOperandGone(ctx, c, names.KubeVirtDevicePlugin, stepWithin))
	require.NoError(t, waitDrivers(ctx, n, stepWithin, map[string]string{gpuAddress: "vfio-pci", vmGPUAddress: "vfio-pci"}),
		"the A10s on vfio-pci again")
	require.NoError(t, waitAllocatable(ctx, c, pgpuResource, 2, stepWithin))
	specs, err := filepath.Glob(filepath.Join(c.HostPath(cluster.KataCDIDir), "sandbox-gpu-kata-*")) // the DaemonSet's --cdi-dir
	require.NoError(t, err)
	require.Len(t, specs, 1, "the Kata plugin's CDI spec in its own folder (never /etc/cdi or /var/run/cdi, where NVIDIA's spec is)")
	for _, dir := range []string{"/etc/cdi", "/var/run/cdi"} {
		other, err := filepath.Glob(filepath.Join(c.HostPath(dir), "sandbox-gpu-kata-*"))
		require.NoError(t, err)
		assert.Empty(t, other, "nothing of the Kata plugin in %s", dir)
	}
	data, err := os.ReadFile(specs[0])
	require.NoError(t, err)
	t.Logf("%s:\n%s", specs[0], indent(string(data)))
	require.NoError(t, waitNodeStateReady(ctx, c, "vm-passthrough", stepWithin))

	ns := "kata"
	require.NoError(t, c.CreateNamespace(ctx, ns, namespaceWithin))
	pod := busyboxPod("kata-gpu", "exec sleep 2147483647")
	pod.Spec.RuntimeClassName = ptr.To(kataHandler)
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{pgpuResource: resource.MustParse("1")}
	runPodThrough(ctx, t, c, ns, pod, kataHandler)
	got := deviceNodes(ctx, t, c, ns, pod.Name, "main", "/dev/vfio/*")
	assert.Contains(t, []map[string]string{vfioNodes(iommuGroup(t, n, gpuAddress)), vfioNodes(iommuGroup(t, n, vmGPUAddress))}, got,
		"the VFIO nodes of one A10 from the Kata plugin's CDI spec, resolved by containerd")
	deletePodAndWait(t, c, ns, pod.Name)
}

// iommuGroup is the IOMMU group of one of the fixture's GPUs, from the simulated sysfs.
func iommuGroup(t *testing.T, n *simnode.Node, address string) string {
	t.Helper()
	link, err := os.Readlink(filepath.Join(n.SysDir(), "bus/pci/devices", address, "iommu_group"))
	require.NoError(t, err)
	return filepath.Base(link)
}

// waitDrivers waits until each function is bound to its driver in the simulated kernel.
func waitDrivers(ctx context.Context, n *simnode.Node, within time.Duration, want map[string]string) error {
	got := map[string]string{}
	err := pollTrue(ctx, within, func() (bool, error) {
		ok := true
		for a, d := range want {
			got[a] = n.Kernel.DriverOf(host.Address(a))
			ok = ok && got[a] == d
		}
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("drivers %v, want %v: %w", got, want, err)
	}
	return nil
}

// vfioNodes are the nodes a container given the group's GPU sees under /dev/vfio: the group node
// and the VFIO container, with the simulated host's numbers (/dev/null's).
func vfioNodes(group string) map[string]string {
	return map[string]string{"/dev/vfio/" + group: "character special file 1:3", "/dev/vfio/vfio": "character special file 1:3"}
}

// deviceNodes lists the files matching glob in a container: path -> "<type> <major>:<minor>" (hex,
// as busybox stat prints them).
func deviceNodes(ctx context.Context, t *testing.T, c *cluster.Cluster, ns, pod, container, glob string) map[string]string {
	t.Helper()
	script := `for f in ` + glob + `; do [ -e "$f" ] && stat -c '%n|%F %t:%T' "$f"; done; true`
	out, _, err := c.Exec(ctx, ns, pod, container, "/bin/sh", "-c", script)
	require.NoError(t, err, "list %s in %s/%s %s", glob, ns, pod, container)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if p, v, ok := strings.Cut(line, "|"); ok {
			got[p] = v
		}
	}
	return got
}
