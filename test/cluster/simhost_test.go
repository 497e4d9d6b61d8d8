package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// startNode builds the simulated host in the cluster's work folder and serves its sys/ in the
// node's mount namespace (simnode); what this machine lacks for that fails the tests that need it.
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
	return nil
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
