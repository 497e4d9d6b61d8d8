package controllers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// clearNodes removes every Node and SandboxGPUNode earlier tests left, for
// tests that count them. No operator may run while it does.
func clearNodes(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, c.DeleteAllOf(ctx, &corev1.Node{}))
	require.NoError(t, c.DeleteAllOf(ctx, &v1alpha1.SandboxGPUNode{}))
	testutil.Eventually(t, wait, "no nodes left", func() bool {
		var nodes corev1.NodeList
		var states v1alpha1.SandboxGPUNodeList
		return c.List(ctx, &nodes) == nil && c.List(ctx, &states) == nil && len(nodes.Items) == 0 && len(states.Items) == 0
	})
}

func getPolicy(c client.Client) *v1alpha1.SandboxGPUPolicy {
	p := &v1alpha1.SandboxGPUPolicy{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: PolicyName}, p); err != nil {
		return nil
	}
	return p
}

// waitPolicyCondition waits until the policy's condition typ has reason
// (and message, unless that is empty) and was computed for the policy's
// generation. A message names the nodes as the count saw them: it tells a
// count from an earlier one with the same reason.
func waitPolicyCondition(t *testing.T, c client.Client, typ, reason, message string) *v1alpha1.SandboxGPUPolicy {
	t.Helper()
	var p *v1alpha1.SandboxGPUPolicy
	testutil.Eventually(t, wait, "policy "+typ+" "+reason+" "+message, func() bool {
		p = getPolicy(c)
		if p == nil {
			return false
		}
		cond := meta.FindStatusCondition(p.Status.Conditions, typ)
		return cond != nil && cond.Reason == reason && (message == "" || cond.Message == message) && cond.ObservedGeneration == p.Generation
	})
	return p
}

// checkPolicyConditions asserts that every condition is a sentence
// computed for the policy's generation.
func checkPolicyConditions(t *testing.T, p *v1alpha1.SandboxGPUPolicy) {
	t.Helper()
	require.NotEmpty(t, p.Status.Conditions)
	for _, cond := range p.Status.Conditions {
		assert.Equal(t, p.Generation, cond.ObservedGeneration, cond.Type)
		assert.Regexp(t, aSentence, cond.Message, cond.Type)
	}
}

func TestPolicyNotReadyWithoutGPUNodes(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	clearNodes(t, c)
	ensureNamespace(t, c, operandNS) // the operand DaemonSets apply (also when this test runs alone)
	setPolicy(t, c, sandboxOn("container"))
	startOperator(t, newClock())
	p := waitPolicyCondition(t, c, v1alpha1.ConditionReady, ReasonNoGPUNodes, "")
	checkPolicyConditions(t, p)
	ready := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, "No GPU node was found: a node counts as one when it is labelled sandbox-gpu.io/gpu.present=true "+
		"(the GPU discovery agent does that from sysfs unless spec.gpuDiscovery turns it off) or Node Feature Discovery labels it "+
		"feature.node.kubernetes.io/pci-10de.present=true (NVIDIA's PCI vendor id).", ready.Message)
	assert.Equal(t, v1alpha1.NodeCounts{}, p.Status.Nodes)

	newNode(t, c, "p-only", nil)
	readyOperands(t, c, "p-only", containerOps...)
	p = waitPolicyCondition(t, c, v1alpha1.ConditionReady, ReasonAllNodesReady, "")
	checkPolicyConditions(t, p)
	assert.Equal(t, "The GPU node is ready.", meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady).Message)
	assert.Equal(t, "No GPU node or operand has failed.", meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionDegraded).Message)
}

// Failed nodes and operands are named in sentences, never as Go lists.
func TestPolicyMessagesNameFailuresInProse(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	clearNodes(t, c)
	setPolicy(t, c, sandboxOn("container"), drainAfter(time.Minute))
	clk := newClock()
	// The operand DaemonSets go to a namespace that does not exist.
	op := startOperatorWith(t, clk, operatorConfig{policyNamespace: "no-such-namespace"})
	for _, n := range []string{"f-1", "f-2", "f-3"} {
		newNode(t, c, n, map[string]string{names.WorkloadConfigLabel: "container"})
		waitState(t, c, n, "applied", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "container" })
	}
	readyOperands(t, c, "f-3", containerOps...)
	for _, n := range []string{"f-2", "f-1"} {
		gpuPod(t, c, n, "nvidia.com/gpu")
		setNodeLabel(t, c, n, names.WorkloadConfigLabel, "vm-passthrough")
		waitState(t, c, n, "draining", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateDraining })
	}
	clk.advance(2 * time.Minute)
	p := waitPolicyCondition(t, c, v1alpha1.ConditionDegraded, ReasonNodesFailed, "")
	testutil.Eventually(t, wait, "both failures counted", func() bool {
		p = getPolicy(c)
		return p.Status.Nodes.Failed == 2 && p.Status.Nodes.Ready == 1
	})
	checkPolicyConditions(t, p)
	degraded := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionDegraded)
	assert.Equal(t, metav1.ConditionTrue, degraded.Status)
	assert.Equal(t, `2 of 3 GPU nodes failed: f-1 and f-2. `+
		`The DaemonSets of gpu-discovery, kata-device-plugin, kubevirt-device-plugin, nri-plugin, nvidia-device-plugin, validator, vfio-manager, vfio-manager-release, vgpu-device-manager and vgpu-device-manager-release `+
		`could not be created: namespaces "no-such-namespace" not found.`, degraded.Message)
	ready := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, ready.Status)
	assert.Equal(t, ReasonNodesNotReady, ready.Reason)
	assert.Equal(t, "1 of 3 GPU nodes is ready; not ready: f-1 (failed) and f-2 (failed). Not every operand could be applied either.", ready.Message)

	// The reconcile counts its error once it returns, after it wrote the status read above.
	testutil.Eventually(t, wait, "the policy reconciler's errors counted", func() bool {
		return counterValue(t, op, MetricReconcileErrors, map[string]string{"controller": policyControllerName}) > 0
	})
}

func TestPolicyConditionMessages(t *testing.T) {
	var failed []string
	for i := range 13 {
		failed = append(failed, fmt.Sprintf("gpu-%02d", i))
	}
	errs := []*operandError{
		{operand: names.VFIOManager, action: "update", err: errors.New("admission webhook denied the request.")},
		{operand: names.Validator, action: "delete", err: errors.New("forbidden")},
		{operand: names.NRIPlugin, action: "update", err: errors.New("admission webhook denied the request")},
	}
	ready, degraded := policyConditions(20, v1alpha1.NodeCounts{Ready: 7, Failed: 13}, failed, failed, errs, []string{"RuntimeClass x was not found."})
	assert.Equal(t, "7 of 20 GPU nodes are ready; not ready: gpu-00, gpu-01, gpu-02, gpu-03, gpu-04, gpu-05, gpu-06, gpu-07, gpu-08, gpu-09 and 3 more. "+
		"Not every operand could be applied either.", ready.Message)
	assert.Equal(t, ReasonNodesFailed, degraded.Reason)
	assert.Equal(t, "13 of 20 GPU nodes failed: gpu-00, gpu-01, gpu-02, gpu-03, gpu-04, gpu-05, gpu-06, gpu-07, gpu-08, gpu-09 and 3 more. "+
		"The DaemonSets of vfio-manager and nri-plugin could not be updated: admission webhook denied the request. "+
		"The DaemonSet of validator could not be deleted: forbidden. RuntimeClass x was not found.", degraded.Message)

	ready, degraded = policyConditions(2, v1alpha1.NodeCounts{Ready: 2}, nil, nil, errs[1:2], nil)
	assert.Equal(t, ReasonOperandsFailed, ready.Reason)
	assert.Equal(t, "All 2 GPU nodes are ready, but not every operand could be applied.", ready.Message)
	assert.Equal(t, ReasonOperandsFailed, degraded.Reason)

	_, degraded = policyConditions(2, v1alpha1.NodeCounts{Ready: 2}, nil, nil, nil, []string{"RuntimeClass x was not found."})
	assert.Equal(t, ReasonIntegrationMissing, degraded.Reason)
	for _, cond := range []metav1.Condition{ready, degraded} {
		assert.Regexp(t, aSentence, cond.Message)
	}
}
