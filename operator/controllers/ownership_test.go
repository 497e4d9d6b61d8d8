package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sandbox-gpu/sandbox-gpu/discovery"
	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

func policyObject(t *testing.T) *v1alpha1.SandboxGPUPolicy {
	t.Helper()
	p := &v1alpha1.SandboxGPUPolicy{}
	require.NoError(t, testClient(t).Get(context.Background(), types.NamespacedName{Name: PolicyName}, p))
	return p
}

// Everything the operator creates hangs off the policy: deleting the policy
// (helm uninstall deletes it) lets garbage collection remove the operand
// DaemonSets and every node state. envtest runs no garbage collector, so
// the owner references are what is checked here; the cluster suite sees
// the cascade.
func TestThePolicyOwnsDaemonSetsAndNodeStates(t *testing.T) {
	c := startTest(t, newClock(), "container")
	newNode(t, c, "own-a", nil)
	st := waitState(t, c, "own-a", "created", func(*v1alpha1.SandboxGPUNode) bool { return true })
	p := policyObject(t)
	assert.True(t, metav1.IsControlledBy(st, p), "the policy controls the node state: %v", st.OwnerReferences)
	assert.Equal(t, string(getNode(t, c, "own-a").UID), st.Labels[NodeUIDLabel])
	testutil.Eventually(t, wait, "operand DaemonSets", func() bool { return len(daemonSets(t, c)) > 0 })
	for name, ds := range daemonSets(t, c) {
		assert.True(t, metav1.IsControlledBy(&ds, p), "the policy controls DaemonSet %s", name)
	}
}

// A node state the operator finds on start whose Node is gone (deleted
// while the operator was down) is removed; so is a state of an earlier
// Node of the same name when that node is reconciled.
func TestStatesOfNodesGoneWhileDownAreRemoved(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	ctx := context.Background()
	setPolicy(t, c, sandboxOn("container"))
	p := policyObject(t)
	orphan := &v1alpha1.SandboxGPUNode{ObjectMeta: metav1.ObjectMeta{Name: "gone-while-down", Labels: map[string]string{NodeUIDLabel: "x"}}}
	require.NoError(t, controllerutil.SetControllerReference(p, orphan, testScheme))
	require.NoError(t, c.Create(ctx, orphan))
	t.Cleanup(func() { _ = c.Delete(ctx, orphan) })
	stale := &v1alpha1.SandboxGPUNode{ObjectMeta: metav1.ObjectMeta{Name: "reborn", Labels: map[string]string{NodeUIDLabel: "an-earlier-node"}}}
	require.NoError(t, controllerutil.SetControllerReference(p, stale, testScheme))
	require.NoError(t, c.Create(ctx, stale))
	stale.Status.AppliedConfig = "vm-passthrough"
	require.NoError(t, c.Status().Update(ctx, stale))
	newNode(t, c, "reborn", nil)

	startOperator(t, newClock())
	testutil.Eventually(t, wait, "the orphan state removed", func() bool { return nodeState(c, "gone-while-down") == nil })
	st := waitState(t, c, "reborn", "a fresh state", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.UID != stale.UID && s.Status.AppliedConfig == "container"
	})
	assert.Equal(t, string(getNode(t, c, "reborn").UID), st.Labels[NodeUIDLabel])
}

// A state made by an operator that had the Node own it (before the policy
// did) is adopted, its status kept: an upgrade does not restart a node.
func TestStateOwnedByTheNodeIsAdopted(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	ctx := context.Background()
	setPolicy(t, c, sandboxOn("vm-passthrough"))
	// The node as the earlier operator left it: labelled for its operands,
	// which are running and ready.
	operands := []string{names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager}
	deploy := map[string]string{}
	for _, o := range operands {
		deploy[names.DeployLabel(o)] = "true"
	}
	newNode(t, c, "upgraded", deploy)
	readyOperands(t, c, "upgraded", operands...)
	node := getNode(t, c, "upgraded")
	old := &v1alpha1.SandboxGPUNode{ObjectMeta: metav1.ObjectMeta{Name: "upgraded"}}
	require.NoError(t, controllerutil.SetControllerReference(node, old, testScheme))
	require.NoError(t, c.Create(ctx, old))
	t.Cleanup(func() { _ = c.Delete(context.Background(), old) })
	since := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	old.Status = v1alpha1.SandboxGPUNodeStatus{WorkloadConfig: "vm-passthrough", AppliedConfig: "vm-passthrough", State: v1alpha1.StateReady, Since: &since}
	require.NoError(t, c.Status().Update(ctx, old))

	startOperator(t, newClock())
	waitState(t, c, "upgraded", "adopted", func(s *v1alpha1.SandboxGPUNode) bool { return s.Labels[NodeUIDLabel] == string(node.UID) })
	// What is checked is the state after a reconcile that follows the
	// adoption, not the instant of adoption (a step would come after it).
	mid := reconciles(t, nodeControllerName)
	setNodeLabel(t, c, "upgraded", "unrelated.example/touch", "1")
	testutil.Eventually(t, wait, "the touched node reconciled", func() bool { return reconciles(t, nodeControllerName) >= mid+1 })
	st := nodeState(c, "upgraded")
	require.NotNil(t, st)
	assert.Equal(t, old.UID, st.UID, "the same object")
	assert.Equal(t, v1alpha1.StateReady, st.Status.State, "still ready: %s", st.Status.Message)
	assert.True(t, metav1.IsControlledBy(st, policyObject(t)))
	assert.Len(t, st.OwnerReferences, 1)
	assert.Equal(t, "vm-passthrough", st.Status.AppliedConfig, "the applied config is kept")
	assert.Equal(t, since.Time, st.Status.Since.Time, "still ready since then: no step was taken again")
}

// Without Node Feature Discovery: the GPU discovery agent labels its Node
// from the (simulated) host, and the operator then manages it as a GPU
// node; a CPU-only node stays untouched.
func TestDiscoveredNodeIsAGPUNode(t *testing.T) {
	c := startTest(t, newClock(), "container")
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(testCfg)
	require.NoError(t, err)
	for _, n := range []string{"disc-a10", "disc-cpu"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"kubernetes.io/os": "linux"}}}
		require.NoError(t, c.Create(ctx, node))
		t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
	}
	runAgent := func(node string, h func() *discovery.Agent) {
		a := h()
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(actx) }()
		t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
		testutil.Eventually(t, wait, "agent of "+node+" ready", func() bool { return a.Report().Ready })
	}
	agent := func(node, fixture string) func() *discovery.Agent {
		return func() *discovery.Agent {
			_, h := hostsim.NewHost(t, fixture)
			a, err := discovery.New(discovery.Options{NodeName: node, Client: cs, Host: h, Resync: time.Hour, Log: logr.Discard()})
			require.NoError(t, err)
			return a
		}
	}
	runAgent("disc-a10", agent("disc-a10", "a10"))
	st := waitState(t, c, "disc-a10", "managed", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "container" })
	assert.Equal(t, v1alpha1.WorkloadContainer, st.Status.WorkloadConfig)
	n := getNode(t, c, "disc-a10")
	assert.Equal(t, "true", n.Labels[names.GPUPresentLabel])
	assert.Equal(t, "1", n.Labels[names.GPUCountLabel])
	assert.Equal(t, containerOps, deployLabels(n))

	// An empty simulated host (no PCI function at all) stands for a CPU node.
	runAgent("disc-cpu", func() *discovery.Agent {
		k, err := hostsim.New(t.TempDir(), true)
		require.NoError(t, err)
		a, err := discovery.New(discovery.Options{NodeName: "disc-cpu", Client: cs, Host: host.New(k.Options()), Resync: time.Hour, Log: logr.Discard()})
		require.NoError(t, err)
		return a
	})
	assert.NotContains(t, getNode(t, c, "disc-cpu").Labels, names.GPUPresentLabel)
	// A GPU node labelled after it proves the operator's queue moved past it.
	require.NoError(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "disc-later"}}))
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "disc-later"}})
	})
	runAgent("disc-later", agent("disc-later", "hgx-h100"))
	waitState(t, c, "disc-later", "managed", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "container" })
	assert.Equal(t, "8", getNode(t, c, "disc-later").Labels[names.GPUCountLabel])
	assert.Nil(t, nodeState(c, "disc-cpu"), "a node without GPUs gets no state")
	assert.Empty(t, deployLabels(getNode(t, c, "disc-cpu")), "and no deploy label")
}
