package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// releaseLabels lists the node's release labels by operand.
func releaseLabels(n *corev1.Node) []string {
	var out []string
	for k, v := range n.Labels {
		if o, ok := strings.CutPrefix(k, names.ReleasePrefix); ok && v == "true" {
			out = append(out, o)
		}
	}
	return out
}

// reportRelease writes a release daemon's report on the node, as the
// daemon does.
func reportRelease(t *testing.T, c client.Client, node, operand string, r wire.ReleaseReport) {
	t.Helper()
	require.NoError(t, patchNode(c, node, func(n *corev1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[names.ReleaseReportAnnotation(operand)] = r.Encode()
	}))
}

// readyNode brings a new node with config up to ready, its operands played
// by Ready pods.
func readyNode(t *testing.T, c client.Client, node, config string, extra map[string]string, operands ...string) {
	t.Helper()
	labels := map[string]string{names.WorkloadConfigLabel: config}
	for k, v := range extra {
		labels[k] = v
	}
	newNode(t, c, node, labels)
	readyOperands(t, c, node, operands...)
	waitState(t, c, node, "ready with "+config, func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.State == v1alpha1.StateReady && s.Status.AppliedConfig == config
	})
}

// TestReleaseBeforeTheNextConfig: a node leaving vm-passthrough swaps the
// VFIO manager for its release in one write (the device plugin and the
// validator stop with it); it stays releasing, the release's reason in its
// message, conditions and one Warning event per reason, until the release
// pod is Ready; then the release label and report go and the new config's
// operands start.
func TestReleaseBeforeTheNextConfig(t *testing.T) {
	c := startTest(t, newClock(), "container")
	readyNode(t, c, "n-leave", "vm-passthrough", nil, names.VFIOManager, names.KubeVirtDevicePlugin, names.Validator)

	setNodeLabel(t, c, "n-leave", names.WorkloadConfigLabel, "container")
	st := waitState(t, c, "n-leave", "releasing", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReleasing })
	n := getNode(t, c, "n-leave")
	assert.Empty(t, deployLabels(n), "the VM operands stop; the new ones wait")
	assert.Equal(t, []string{names.VFIOManager}, releaseLabels(n))
	assert.Equal(t, "vm-passthrough", st.Status.AppliedConfig)
	assert.Contains(t, st.Status.Message, "waiting for vfio-manager-release to return every GPU to its host driver")
	p := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionProgressing)
	require.NotNil(t, p)
	assert.Equal(t, ReasonReleasing, p.Reason)
	waitEvent(t, c, "n-leave", EventReleasing, 1)

	held := "0000:3b:00.0: in use: held by pid 4242 (qemu-kvm)"
	reportRelease(t, c, "n-leave", names.VFIOManager, wire.ReleaseReport{Reason: held, Left: []string{"0000:3b:00.0"}})
	st = waitState(t, c, "n-leave", "the release's reason", func(s *v1alpha1.SandboxGPUNode) bool { return strings.Contains(s.Status.Message, held) })
	assert.Equal(t, v1alpha1.StateReleasing, st.Status.State)
	assert.Contains(t, meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionReady).Message, held)
	waitEvent(t, c, "n-leave", EventReleaseRefused, 1)
	moreReconciles(t, 3, func() { setNodeLabel(t, c, "n-leave", "unrelated.example/touch", "1") })
	assert.Len(t, operatorEvents(t, c, "n-leave")[EventReleaseRefused], 1, "one event per reason")
	assert.Equal(t, corev1.EventTypeWarning, operatorEvents(t, c, "n-leave")[EventReleaseRefused][0].Type)

	readyOperands(t, c, "n-leave", names.ReleaseOperand(names.VFIOManager))
	waitState(t, c, "n-leave", "configuring container", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.AppliedConfig == "container" && s.Status.State == v1alpha1.StateConfiguring
	})
	n = getNode(t, c, "n-leave")
	assert.Equal(t, containerOps, deployLabels(n))
	assert.Empty(t, releaseLabels(n))
	assert.NotContains(t, n.Annotations, names.ReleaseReportAnnotation(names.VFIOManager), "the report goes with the release")
	waitEvent(t, c, "n-leave", EventReleased, 1)
	readyOperands(t, c, "n-leave", containerOps...)
	st = waitState(t, c, "n-leave", "ready", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })
	require.NotNil(t, st.Status.Transition.Completed)
	assert.Equal(t, "vm-passthrough", st.Status.Transition.From)
}

// TestVGPUReleaseKeepsTheHostDriver: leaving vm-vgpu, the vGPU host driver
// keeps running while the vGPU device manager's release removes the vGPUs
// (nothing can be removed without it), and the device manager's stale
// nvidia.com/vgpu.config.state label goes.
func TestVGPUReleaseKeepsTheHostDriver(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	on := true
	setPolicy(t, c, sandboxOn("container"), func(s *v1alpha1.SandboxGPUPolicySpec) {
		s.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Image: "registry.example/vgpu-manager:550.90.05"}
	})
	startOperator(t, newClock())
	readyNode(t, c, "n-vgpu-leave", "vm-vgpu", map[string]string{names.VGPUConfigStateLabel: "success"},
		names.VGPUManager, names.VGPUDeviceManager, names.KubeVirtDevicePlugin, names.Validator)

	setNodeLabel(t, c, "n-vgpu-leave", names.WorkloadConfigLabel, "vm-passthrough")
	waitState(t, c, "n-vgpu-leave", "releasing", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReleasing })
	n := getNode(t, c, "n-vgpu-leave")
	assert.Equal(t, []string{names.VGPUManager}, deployLabels(n), "the host driver stays")
	assert.Equal(t, []string{names.VGPUDeviceManager}, releaseLabels(n))
	assert.NotContains(t, n.Labels, names.VGPUConfigStateLabel, "the node leaves vm-vgpu")
	assert.Contains(t, nodeState(c, "n-vgpu-leave").Status.Message, "remove every vGPU and disable the SR-IOV VFs")

	readyOperands(t, c, "n-vgpu-leave", names.ReleaseOperand(names.VGPUDeviceManager))
	waitState(t, c, "n-vgpu-leave", "configuring vm-passthrough", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.AppliedConfig == "vm-passthrough"
	})
	n = getNode(t, c, "n-vgpu-leave")
	assert.ElementsMatch(t, []string{names.VFIOManager, names.KubeVirtDevicePlugin, names.Validator}, deployLabels(n))
	assert.Empty(t, releaseLabels(n))

	// A terminating device manager that writes its state label once more
	// is cleaned up again.
	setNodeLabel(t, c, "n-vgpu-leave", names.VGPUConfigStateLabel, "success")
	testutil.Eventually(t, wait, "the stale state label removed again", func() bool {
		_, ok := getNode(t, c, "n-vgpu-leave").Labels[names.VGPUConfigStateLabel]
		return !ok
	})
}

// TestReleaseTimeoutFailsTheNode: a release that does not finish within
// the drain timeout fails the node (ReleaseTimedOut, a Warning event); it
// goes on once the release is done.
func TestReleaseTimeoutFailsTheNode(t *testing.T) {
	clk := newClock()
	c := startTest(t, clk, "container", drainAfter(time.Minute))
	readyNode(t, c, "n-rel-stuck", "vm-passthrough", nil, names.VFIOManager, names.KubeVirtDevicePlugin, names.Validator)
	setNodeLabel(t, c, "n-rel-stuck", names.WorkloadConfigLabel, "container")
	waitState(t, c, "n-rel-stuck", "releasing", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReleasing })
	reportRelease(t, c, "n-rel-stuck", names.VFIOManager, wire.ReleaseReport{Reason: "0000:3b:00.0: in use: allocated as 0000:3b:00.0 to pod vms/vm-a"})
	clk.advance(2 * time.Minute)
	st := waitState(t, c, "n-rel-stuck", "failed", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateFailed })
	assert.Contains(t, st.Status.Message, "timed out after 1m0s")
	assert.Contains(t, st.Status.Message, "vms/vm-a")
	assert.Equal(t, ReasonReleaseTimedOut, meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionDegraded).Reason)
	waitEvent(t, c, "n-rel-stuck", EventReleaseTimedOut, 1)
	assert.Equal(t, []string{names.VFIOManager}, releaseLabels(getNode(t, c, "n-rel-stuck")), "the release goes on")

	readyOperands(t, c, "n-rel-stuck", names.ReleaseOperand(names.VFIOManager))
	waitState(t, c, "n-rel-stuck", "configuring container", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.AppliedConfig == "container" && s.Status.State == v1alpha1.StateConfiguring
	})
}

// deletePolicyNow deletes the policy without its release (its finalizer
// dropped: no operator may be running to remove it) and waits until it is
// gone.
func deletePolicyNow(tb testing.TB, c client.Client) {
	tb.Helper()
	ctx := context.Background()
	p := &v1alpha1.SandboxGPUPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: PolicyName}, p); err != nil {
		return
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Finalizers = nil
	if err := c.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
		tb.Fatal(err)
	}
	if err := c.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
		tb.Fatal(err)
	}
	testutil.Eventually(tb, wait, "the policy gone", func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: PolicyName}, &v1alpha1.SandboxGPUPolicy{}))
	})
}
