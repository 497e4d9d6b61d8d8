// Package cluster is the end-to-end suite of the one-node cluster of real parts
// (test/internal/cluster): etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// containerd 2.4.2 with runc and the bridge CNI, and a kubelet, started once for the package by
// TestMain and torn down after the last test, with the host checked against a snapshot taken
// before. The parts come from hack/fetch-cluster.sh (`make test-deps`); it needs root.
//
// The node is a simulated GPU host (test/internal/simnode: hostsim's "a10" fixture, its sys/ served
// over FUSE in the node's mount namespace, so the operands' sysfs writes take effect), and the
// project's images (bin/images/*.tar, from `make images`) are imported into containerd: TestSandboxGPU
// installs the Helm chart on it and takes the node through its configs (system_test.go). The chart
// and the operator's DaemonSets are the production ones; a mutating webhook of this test process
// (simulatedHostWebhook) puts each operand pod on the simulated host as it is created.
//
// Missing parts (or not being root) fail every test, saying how to install them (make test-deps);
// missing images or FUSE fail the tests that need them (make images). Only the house-wide
// SANDBOX_GPU_SKIP_MISSING_PEERS=1 outside CI (testutil.MissingPeer) makes them skip instead. A
// cluster or simulated host that fails to come up fails the run.
//
// SANDBOX_GPU_CLUSTER_LOGS=DIR keeps the components' logs in DIR, and the product's pod logs. SANDBOX_GPU_CLUSTER_HOLD=1 keeps
// the cluster up after the tests until SIGINT or SIGTERM, printing its kubeconfig (run go test with
// -timeout 0).
package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/simnode"
)

const (
	logsEnv = "SANDBOX_GPU_CLUSTER_LOGS"
	holdEnv = "SANDBOX_GPU_CLUSTER_HOLD"

	// startWithin bounds the whole bring-up (a warm one takes well under a minute on 2 busy cores).
	startWithin = 5 * time.Minute
)

var (
	// shared is the package's cluster; nil when skipReason is set.
	shared *cluster.Cluster
	// skipReason, when set, says which parts are missing: every test fails with it (or skips with
	// SANDBOX_GPU_SKIP_MISSING_PEERS=1 outside CI).
	skipReason string
	// startedIn is how long the bring-up took.
	startedIn time.Duration
	// node is the simulated GPU host of the cluster's node (its sys/ served in the node's mount
	// namespace); nil when nodeMissing is set.
	node        *simnode.Node
	nodeMissing string
	// images are the project's image archives imported into containerd; imagesMissing says why
	// there are none.
	images        []string
	imagesMissing string

	teardownOnce sync.Once
	teardownErr  error
	tornDown     bool
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	start := time.Now()
	images, imagesMissing = findImages()
	c, err := cluster.Start(ctx, cluster.Options{
		LogsDir:      os.Getenv(logsEnv),
		Images:       images,
		RuncHandlers: []string{testHandler, kataHandler},
		Logf: func(format string, args ...any) {
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, "cluster: "+format+"\n", args...)
			}
		},
	})
	if cluster.IsMissing(err) {
		// Every test fails saying what to install (or skips where that is allowed).
		skipReason = err.Error()
		return m.Run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: start the one-node cluster: %v\n", err)
		return 1
	}
	shared, startedIn = c, time.Since(start)
	fmt.Fprintf(os.Stderr, "cluster: up in %v (node %s, logs in %s)\n", startedIn.Round(time.Millisecond), c.NodeName(), c.LogsDir())
	if err := startNode(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the simulated GPU host: %v\n", err)
		if err := teardown(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: teardown: %v\n", err)
		}
		return 1
	}
	code := m.Run()
	if os.Getenv(holdEnv) == "1" {
		hold(c)
	}
	if err := teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: teardown: %v\n", err)
		code = 1
	}
	return code
}

// teardown stops the shared cluster and checks that the host is as it was before the cluster
// started. It runs once: in TestTeardownRestoresHost when that runs, else after the tests.
func teardown() error {
	teardownOnce.Do(func() {
		if shared == nil {
			return
		}
		tornDown = true
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		err := shared.Stop(ctx)
		// The node's namespace and its containers are gone, and the simulated host's mount with
		// them: the FUSE server ends (Close also detaches the mount where the namespace is left).
		if node != nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = errors.Join(err, node.Close(closeCtx))
		}
		if err != nil {
			teardownErr = err
			return
		}
		teardownErr = shared.VerifyHostRestored()
		fmt.Fprintf(os.Stderr, "cluster: torn down and host checked in %v\n", time.Since(start).Round(time.Millisecond))
	})
	return teardownErr
}

// hold keeps the cluster up until SIGINT or SIGTERM.
func hold(c *cluster.Cluster) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "cluster: held (%s=1); Ctrl-C tears it down\n  export KUBECONFIG=%s\n  logs: %s\n  containerd: %s\n",
		holdEnv, c.Kubeconfig, c.LogsDir(), c.ContainerdSocket())
	<-ctx.Done()
}

// requireCluster returns the shared cluster, or fails the test (testutil.MissingPeer); when the test
// fails, the last lines of the kubelet's and containerd's logs are added to its output.
func requireCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	if skipReason != "" {
		testutil.MissingPeer(t, "%s", skipReason)
	}
	if shared == nil {
		t.Fatal("no cluster")
	}
	if tornDown {
		t.Fatal("the cluster is torn down already (TestTeardownRestoresHost runs last; run the tests in file order)")
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, comp := range []string{"kubelet", "containerd"} {
				t.Logf("last lines of %s's log:\n%s", comp, indent(shared.LogTail(comp, 40)))
			}
		}
	})
	return shared
}

// testContext is a context bounded by within and by the test's end.
func testContext(t *testing.T, within time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), within)
	t.Cleanup(cancel)
	return ctx
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
