package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/simnode"
)

const (
	// kataHandler is the CRI runtime handler of Kata's NVIDIA GPU runtime class. Here containerd
	// maps it to runc (Options.RuncHandlers): the Kata shim needs a VM and cannot run on this
	// machine, so the handler's name stands in for it; what the suite checks is that the kubelet
	// and containerd take the pod through that handler and resolve the Kata plugin's CDI spec.
	kataHandler = "kata-qemu-nvidia-gpu"
	// fixture is the simulated host of the node: two A10s (10de:2236) on nvidia, 0000:3b:00.0 on
	// NUMA node 0 in IOMMU group 12 and 0000:af:00.0 on NUMA node 1 in group 60 (the smallest
	// mixed node).
	fixture = "a10x2"
	// imagesHint says how to make the images.
	imagesHint = "run `make images` (it writes bin/images/<binary>.tar, which the suite imports into containerd)"
)

// findImages lists the project's image archives, bin/images/*.tar, and says what is missing: one
// per binary of cmd/.
func findImages() ([]string, string) {
	root, err := e2e.RepoRoot()
	if err != nil {
		return nil, err.Error()
	}
	cmds, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return nil, err.Error()
	}
	var images, missing []string
	for _, e := range cmds {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(root, "bin", "images", e.Name()+".tar")
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
			continue
		}
		images = append(images, p)
	}
	if len(missing) > 0 {
		return nil, fmt.Sprintf("no image archive %s: %s", strings.Join(missing, ", "), imagesHint)
	}
	return images, ""
}

// startNode builds the simulated host in the cluster's work folder, serves its sys/ in the node's
// mount namespace (simnode) and puts every operand pod on it (simulatedHostWebhook); what this
// machine lacks for that fails the tests that need it.
func startNode(ctx context.Context, c *cluster.Cluster) error {
	if m := simnode.Missing(); len(m) > 0 {
		nodeMissing = "the simulated GPU host needs " + strings.Join(m, ", ")
		return nil
	}
	dir := filepath.Join(c.Dir(), "simnode")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("simulated host folder: %w", err)
	}
	start := time.Now()
	n, err := simnode.Start(ctx, simnode.Options{Fixture: fixture, Dir: dir, Namespace: c.NodeNamespace()})
	if err != nil {
		return err
	}
	node = n
	fmt.Fprintf(os.Stderr, "cluster: simulated %s host served in the node's namespace in %v (%s)\n",
		fixture, time.Since(start).Round(time.Millisecond), n.Root())
	return c.ServePodMutator(ctx, simulatedHostWebhook, operandNamespace, func(p *corev1.Pod) (bool, error) {
		return simnode.OntoHost(n.Root(), p)
	})
}

// simulatedHostWebhook is the suite's mutating webhook (cluster.ServePodMutator): every pod created
// in the operand namespace goes through simnode.OntoHost, so the operands read the simulated host
// while the chart and the operator's DaemonSets are exactly what a user's cluster gets (nothing of
// the product can be pointed at another host: no chart value, no operator flag).
const simulatedHostWebhook = "sandbox-gpu-simulated-host"

// onSimulatedHost checks the suite's way to its simulated host: every DaemonSet in the operand
// namespace names nothing of the host's tree (root) and each of its live pods is its template as
// simnode.OntoHost puts it on the tree (the same host folders at the same places, the same
// arguments), marked by the webhook where that changed it. It returns how many pods the webhook
// changed.
func onSimulatedHost(ctx context.Context, c *cluster.Cluster, root string) (int, error) {
	dss, err := c.Client.AppsV1().DaemonSets(operandNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list DaemonSets in %s: %w", operandNamespace, err)
	}
	moved := 0
	for _, ds := range dss.Items {
		tmpl, err := json.Marshal(ds.Spec.Template)
		if err != nil {
			return 0, err
		}
		if strings.Contains(string(tmpl), root) {
			return 0, fmt.Errorf("DaemonSet %s names the simulated host %s: %s", ds.Name, root, tmpl)
		}
		want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels},
			Spec: *ds.Spec.Template.Spec.DeepCopy()}
		changed, err := simnode.OntoHost(root, want)
		if err != nil {
			return 0, err
		}
		sel := metav1.FormatLabelSelector(ds.Spec.Selector)
		pods, err := c.Client.CoreV1().Pods(operandNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return 0, fmt.Errorf("list pods %s: %w", sel, err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !metav1.IsControlledBy(&p, &ds) {
				continue
			}
			if got, w := hostMounts(&p), hostMounts(want); !reflect.DeepEqual(got, w) {
				return 0, fmt.Errorf("pod %s mounts %v, want %v (its DaemonSet's on the simulated host)", p.Name, got, w)
			}
			if got, w := args(&p), args(want); !reflect.DeepEqual(got, w) {
				return 0, fmt.Errorf("pod %s runs %v, want %v (its DaemonSet's on the simulated host)", p.Name, got, w)
			}
			if marked := p.Annotations[cluster.WebhookAdmittedAnnotation] == simulatedHostWebhook; marked != changed {
				return 0, fmt.Errorf("pod %s: marked by the webhook %v, want %v", p.Name, marked, changed)
			}
			if changed {
				moved++
			}
		}
	}
	return moved, nil
}

// hostMounts are a pod's hostPath mounts: container -> host path -> "<mount path>:<ro|rw>".
func hostMounts(p *corev1.Pod) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, c := range p.Spec.Containers {
		out[c.Name] = map[string]string{}
		for _, m := range c.VolumeMounts {
			for _, v := range p.Spec.Volumes {
				if v.Name == m.Name && v.HostPath != nil {
					out[c.Name][v.HostPath.Path] = m.MountPath + map[bool]string{true: ":ro", false: ":rw"}[m.ReadOnly]
				}
			}
		}
	}
	return out
}

// args are a pod's containers' arguments by container.
func args(p *corev1.Pod) map[string][]string {
	out := map[string][]string{}
	for _, c := range p.Spec.Containers {
		out[c.Name] = c.Args
	}
	return out
}

// requireProduct returns the cluster and its simulated GPU host, or fails the test
// (testutil.MissingPeer) when the images or what the simulated host needs are missing.
func requireProduct(t *testing.T) (*cluster.Cluster, *simnode.Node) {
	t.Helper()
	c := requireCluster(t)
	if imagesMissing != "" {
		testutil.MissingPeer(t, "%s", imagesMissing)
	}
	if nodeMissing != "" {
		testutil.MissingPeer(t, "%s", nodeMissing)
	}
	if node == nil {
		t.Fatal("no simulated GPU host")
	}
	return c, node
}
