package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

const wait = 20 * time.Second

func setPolicy(t *testing.T, c client.Client, sw v1alpha1.SandboxWorkloads, mutate ...func(*v1alpha1.SandboxGPUPolicySpec)) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &v1alpha1.SandboxGPUPolicy{}
		err := c.Get(ctx, types.NamespacedName{Name: PolicyName}, p)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		p.Name = PolicyName
		p.Spec = v1alpha1.SandboxGPUPolicySpec{SandboxWorkloads: sw}
		for _, m := range mutate {
			m(&p.Spec)
		}
		if apierrors.IsNotFound(err) {
			collectOrphans(t, c)
			return c.Create(ctx, p)
		}
		return c.Update(ctx, p)
	})
	require.NoError(t, err)
}

// collectOrphans deletes what a deleted policy controlled, the operand
// DaemonSets and the node states, as a cluster's garbage collector does
// (envtest runs none): a test that creates the policy anew then sees only
// what its own policy owns, also when an earlier test (or run, go test
// -count=2) deleted the last one.
func collectOrphans(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	var sets appsv1.DaemonSetList
	require.NoError(t, c.List(ctx, &sets))
	var states v1alpha1.SandboxGPUNodeList
	require.NoError(t, c.List(ctx, &states))
	var orphans []client.Object
	for i := range sets.Items {
		orphans = append(orphans, &sets.Items[i])
	}
	for i := range states.Items {
		orphans = append(orphans, &states.Items[i])
	}
	for _, o := range orphans {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "SandboxGPUPolicy" {
			require.NoError(t, client.IgnoreNotFound(c.Delete(ctx, o)))
		}
	}
}

func newNode(t *testing.T, c client.Client, name string, labels map[string]string) {
	t.Helper()
	l := map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"}
	for k, v := range labels {
		l[k] = v
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
	require.NoError(t, c.Create(context.Background(), n))
	t.Cleanup(func() { _ = c.Delete(context.Background(), n) })
}

func getNode(t *testing.T, c client.Client, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	require.NoError(t, c.Get(context.Background(), types.NamespacedName{Name: name}, n))
	return n
}

func setNodeLabel(t *testing.T, c client.Client, name, key, value string) {
	t.Helper()
	require.NoError(t, patchNode(c, name, func(n *corev1.Node) {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[key] = value
	}))
}

func nodeState(c client.Client, name string) *v1alpha1.SandboxGPUNode {
	st := &v1alpha1.SandboxGPUNode{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: name}, st); err != nil {
		return nil
	}
	return st
}

func waitState(t *testing.T, c client.Client, name, what string, cond func(*v1alpha1.SandboxGPUNode) bool) *v1alpha1.SandboxGPUNode {
	t.Helper()
	var st *v1alpha1.SandboxGPUNode
	testutil.Eventually(t, wait, "node "+name+": "+what, func() bool {
		st = nodeState(c, name)
		return st != nil && cond(st)
	})
	return st
}

func deployLabels(n *corev1.Node) []string {
	var out []string
	for k := range n.Labels {
		if o, ok := strings.CutPrefix(k, names.DeployPrefix); ok {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// readyOperands plays the DaemonSets: a Ready pod per operand on the node.
func readyOperands(t *testing.T, c client.Client, node string, operandNames ...string) {
	t.Helper()
	ctx := context.Background()
	ensureNamespace(t, c, operandNS)
	for _, o := range operandNames {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: o + "-" + node, Namespace: operandNS, Labels: map[string]string{names.OperandLabel: o}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "operand"}}}}
		require.NoError(t, c.Create(ctx, p))
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		require.NoError(t, c.Status().Update(ctx, p))
		t.Cleanup(func() { _ = c.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	}
}

func gpuPod(t *testing.T, c client.Client, node, res string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train-" + node, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "cuda",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}}}}}}
	require.NoError(t, c.Create(context.Background(), p))
	t.Cleanup(func() { _ = c.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	return p
}

// containerOps are a container node's operands with sandbox workloads on
// (the NRI plugin and NVIDIA's device plugin), sorted.
var containerOps = []string{names.NRIPlugin, names.NVIDIADevicePlugin}

func sandboxOn(def string) v1alpha1.SandboxWorkloads {
	return v1alpha1.SandboxWorkloads{Enabled: true, Mode: v1alpha1.ModeKubeVirt, DefaultWorkload: def}
}

// startTest readies a test of the operator on the API server: the operand
// namespace (as an install has it), the policy with sandbox workloads on
// (def the default config, mutate changing the rest of its spec) and the
// operator running on clk. It returns the test's client.
func startTest(t *testing.T, clk *clock, def string, mutate ...func(*v1alpha1.SandboxGPUPolicySpec)) client.Client {
	t.Helper()
	needEnv(t)
	c := testClient(t)
	ensureNamespace(t, c, operandNS)
	setPolicy(t, c, sandboxOn(def), mutate...)
	startOperator(t, clk)
	return c
}

// drainAfter sets the policy's drain timeout to d.
func drainAfter(d time.Duration) func(*v1alpha1.SandboxGPUPolicySpec) {
	return func(s *v1alpha1.SandboxGPUPolicySpec) { s.Drain.Timeout = &metav1.Duration{Duration: d} }
}

func TestEachWorkloadConfig(t *testing.T) {
	c := startTest(t, newClock(), "container")
	cases := map[string]struct {
		label    string
		config   string
		operands []string
	}{
		"n-default":     {"", "container", containerOps},
		"n-container":   {"container", "container", containerOps},
		"n-passthrough": {"vm-passthrough", "vm-passthrough", []string{names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager}},
		"n-vgpu":        {"vm-vgpu", "vm-vgpu", []string{names.KubeVirtDevicePlugin, names.Validator, names.VGPUDeviceManager}},
	}
	for name, tc := range cases {
		labels := map[string]string{}
		if tc.label != "" {
			labels[names.WorkloadConfigLabel] = tc.label
		}
		newNode(t, c, name, labels)
		st := waitState(t, c, name, "configuring", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateConfiguring })
		assert.Equal(t, tc.config, st.Status.WorkloadConfig, name)
		assert.Contains(t, st.Status.Message, "waiting for operands", name)
		assert.ElementsMatch(t, tc.operands, deployLabels(getNode(t, c, name)), name)
		readyOperands(t, c, name, tc.operands...)
		waitState(t, c, name, "ready", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })
	}

	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-cpu", Labels: map[string]string{"kubernetes.io/os": "linux"}}}
	require.NoError(t, c.Create(context.Background(), other))
	t.Cleanup(func() { _ = c.Delete(context.Background(), other) })
	// The GPU nodes above were reconciled after it existed only if the
	// operator looked at it too; a later GPU node proves the queue moved on.
	newNode(t, c, "n-after-cpu", nil)
	waitState(t, c, "n-after-cpu", "seen", func(*v1alpha1.SandboxGPUNode) bool { return true })
	assert.Nil(t, nodeState(c, "n-cpu"), "nodes without GPUs get no state")
	assert.Empty(t, deployLabels(getNode(t, c, "n-cpu")), "nodes without GPUs are never touched")
}

func TestInvalidLabelFallsBackAndIsReported(t *testing.T) {
	c := startTest(t, newClock(), "vm-passthrough")
	newNode(t, c, "n-bogus", map[string]string{names.WorkloadConfigLabel: "vm-passthru"})
	st := waitState(t, c, "n-bogus", "configured", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig != "" })
	assert.Equal(t, "vm-passthrough", st.Status.WorkloadConfig, "the policy default")
	assert.Contains(t, st.Status.Message, `invalid nvidia.com/gpu.workload.config="vm-passthru"`)
	assert.Contains(t, st.Status.Message, "n-bogus")
	testutil.Eventually(t, wait, "a Warning event on the node", func() bool {
		var evs corev1.EventList
		if err := c.List(context.Background(), &evs, client.InNamespace("default")); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "n-bogus" && e.Reason == "InvalidWorkloadConfig" && e.Type == corev1.EventTypeWarning {
				return true
			}
		}
		return false
	})
}

func TestPolicyDefaultChangeMovesUnlabelledNodes(t *testing.T) {
	c := startTest(t, newClock(), "container")
	newNode(t, c, "n-follow", nil)
	newNode(t, c, "n-pinned", map[string]string{names.WorkloadConfigLabel: "container"})
	waitState(t, c, "n-follow", "container", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "container" })
	waitState(t, c, "n-pinned", "container", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "container" })

	setPolicy(t, c, sandboxOn("vm-passthrough"))
	waitState(t, c, "n-follow", "vm-passthrough", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "vm-passthrough" })
	assert.Contains(t, deployLabels(getNode(t, c, "n-follow")), names.VFIOManager)
	assert.NotContains(t, deployLabels(getNode(t, c, "n-follow")), names.NRIPlugin, "the old operand is paused")
	assert.Equal(t, "container", nodeState(c, "n-pinned").Status.AppliedConfig, "a labelled node keeps its config")
}

// A node switching config waits while a pod holds a GPU of the old config,
// survives an operator restart in the middle, and proceeds when the pod goes.
func TestTransitionDrainsAndResumesAfterRestart(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	setPolicy(t, c, sandboxOn("container"))
	clk := newClock()
	stop := startOperator(t, clk)
	newNode(t, c, "n-busy", map[string]string{names.WorkloadConfigLabel: "container"})
	readyOperands(t, c, "n-busy", containerOps...)
	waitState(t, c, "n-busy", "ready", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })
	pod := gpuPod(t, c, "n-busy", "nvidia.com/gpu")

	setNodeLabel(t, c, "n-busy", names.WorkloadConfigLabel, "vm-passthrough")
	st := waitState(t, c, "n-busy", "draining", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateDraining })
	assert.Contains(t, st.Status.Message, "default/train-n-busy")
	assert.Equal(t, containerOps, deployLabels(getNode(t, c, "n-busy")), "nothing switches while a GPU is in use")

	stop() // the operator restarts mid-transition
	startOperator(t, clk)
	st = waitState(t, c, "n-busy", "still draining", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.State == v1alpha1.StateDraining && strings.Contains(s.Status.Message, "train-n-busy")
	})
	assert.Equal(t, "container", st.Status.AppliedConfig)

	require.NoError(t, c.Delete(context.Background(), pod, client.GracePeriodSeconds(0)))
	waitState(t, c, "n-busy", "configuring vm-passthrough", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.AppliedConfig == "vm-passthrough" && s.Status.State == v1alpha1.StateConfiguring
	})
	assert.ElementsMatch(t, []string{names.VFIOManager, names.KubeVirtDevicePlugin, names.Validator}, deployLabels(getNode(t, c, "n-busy")))
}

func TestDrainTimeoutFailsTheNode(t *testing.T) {
	clk := newClock()
	c := startTest(t, clk, "container", drainAfter(time.Minute))
	newNode(t, c, "n-stuck", map[string]string{names.WorkloadConfigLabel: "container"})
	waitState(t, c, "n-stuck", "applied", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "container" })
	gpuPod(t, c, "n-stuck", "nvidia.com/gpu")
	setNodeLabel(t, c, "n-stuck", names.WorkloadConfigLabel, "vm-vgpu")
	waitState(t, c, "n-stuck", "draining", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateDraining })
	clk.advance(2 * time.Minute)
	st := waitState(t, c, "n-stuck", "failed", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateFailed })
	assert.Contains(t, st.Status.Message, "timed out")
	assert.Contains(t, st.Status.Message, "train-n-stuck")
	assert.Equal(t, containerOps, deployLabels(getNode(t, c, "n-stuck")))
}

// A node that goes takes its state with it; a new node of the same name
// starts afresh.
func TestNodeDeletionRemovesItsState(t *testing.T) {
	c := startTest(t, newClock(), "container")
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-gone", Labels: map[string]string{
		"feature.node.kubernetes.io/pci-10de.present": "true", names.WorkloadConfigLabel: "vm-passthrough"}}}
	require.NoError(t, c.Create(context.Background(), n))
	waitState(t, c, "n-gone", "applied", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "vm-passthrough" })
	require.NoError(t, c.Delete(context.Background(), n))
	testutil.Eventually(t, wait, "state removed", func() bool { return nodeState(c, "n-gone") == nil })

	newNode(t, c, "n-gone", nil) // same name, no label: container, no drain from the old life
	st := waitState(t, c, "n-gone", "applied afresh", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "container" })
	assert.NotEqual(t, v1alpha1.StateDraining, st.Status.State)
}

// reconciles reads controller-runtime's reconcile counter of a controller.
func reconciles(t testing.TB, controller string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// Once nodes are ready, reconciling them again writes nothing.
func TestSteadyStateWritesNothing(t *testing.T) {
	c := startTest(t, newClock(), "container")
	newNode(t, c, "n-steady", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	readyOperands(t, c, "n-steady", names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager)
	st := waitState(t, c, "n-steady", "ready", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })

	before := reconciles(t, "sandbox-gpu-node")
	setPolicy(t, c, sandboxOn("container"), func(s *v1alpha1.SandboxGPUPolicySpec) { s.Kata.RuntimeClassName = "unrelated" })
	testutil.Eventually(t, wait, "the nodes reconciled again", func() bool { return reconciles(t, "sandbox-gpu-node") >= before+1 })
	// One more round through the queue, so that the reconcile of n-steady is done.
	mid := reconciles(t, "sandbox-gpu-node")
	setNodeLabel(t, c, "n-steady", "unrelated.example/touch", "1")
	nodeRV := getNode(t, c, "n-steady").ResourceVersion
	testutil.Eventually(t, wait, "the touched node reconciled", func() bool { return reconciles(t, "sandbox-gpu-node") >= mid+1 })
	assert.Equal(t, nodeRV, getNode(t, c, "n-steady").ResourceVersion, "no label write in steady state")
	assert.Equal(t, st.ResourceVersion, nodeState(c, "n-steady").ResourceVersion, "no status write in steady state")
}

// With drain.evict the GPU users of the old config are evicted (the
// eviction API, so PodDisruptionBudgets apply).
func TestDrainEvictsWhenThePolicySaysSo(t *testing.T) {
	c := startTest(t, newClock(), "container", func(s *v1alpha1.SandboxGPUPolicySpec) { s.Drain.Evict = true })
	newNode(t, c, "n-evict", map[string]string{names.WorkloadConfigLabel: "container"})
	waitState(t, c, "n-evict", "applied", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "container" })
	pod := gpuPod(t, c, "n-evict", "nvidia.com/gpu")
	setNodeLabel(t, c, "n-evict", names.WorkloadConfigLabel, "vm-passthrough")
	testutil.Eventually(t, wait, "the GPU pod evicted", func() bool {
		p := &corev1.Pod{}
		err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), p)
		return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
	})
}

func TestTrimNodeKeepsWhatTheOperatorReads(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"big": "y", names.PermittedAnnotation: "{}"}},
		Status: corev1.NodeStatus{Capacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")},
			Images: []corev1.ContainerImage{{Names: []string{"huge"}}}, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady}}}}
	out, err := TrimNode(n)
	require.NoError(t, err)
	tn := out.(*corev1.Node)
	assert.Equal(t, map[string]string{"a": "b"}, tn.Labels)
	assert.Equal(t, "8", tn.Status.Capacity.Name("nvidia.com/gpu", resource.DecimalSI).String())
	assert.Empty(t, tn.Status.Images)
	assert.Empty(t, tn.Status.Conditions)
	assert.Equal(t, map[string]string{names.PermittedAnnotation: "{}"}, tn.Annotations, "only what the KubeVirt sync reads")

	// A mixed node: the split, its report (NVIDIA's device plugin follows
	// it) and a release report stay.
	mixed := map[string]string{names.VMGPUsAnnotation: "4", names.VMGPUsReportAnnotation: `{"declared":"4"}`,
		names.ReleaseReportAnnotation(names.VFIOManager): "{}"}
	n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{"big": "y"}}}
	for k, v := range mixed {
		n.Annotations[k] = v
	}
	out, err = TrimNode(n)
	require.NoError(t, err)
	assert.Equal(t, mixed, out.(*corev1.Node).Annotations)
}
