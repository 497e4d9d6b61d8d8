package controllers

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// wantConditions is what Ready, Progressing and Degraded say: status and
// reason of each.
type wantConditions struct {
	ready, progressing, degraded    metav1.ConditionStatus
	readyR, progressingR, degradedR string
}

// aSentence: a capital letter (or a number) first, a period last, no Go list
// or map.
var aSentence = regexp.MustCompile(`^[A-Z0-9][^\[\]{}]*[.]$`)

// checkConditions asserts the three conditions, their observedGeneration
// (the object's generation) and that each message is a sentence.
func checkConditions(t *testing.T, st *v1alpha1.SandboxGPUNode, want wantConditions) {
	t.Helper()
	for _, c := range []struct {
		typ    string
		status metav1.ConditionStatus
		reason string
	}{
		{v1alpha1.ConditionReady, want.ready, want.readyR},
		{v1alpha1.ConditionProgressing, want.progressing, want.progressingR},
		{v1alpha1.ConditionDegraded, want.degraded, want.degradedR},
	} {
		got := meta.FindStatusCondition(st.Status.Conditions, c.typ)
		if !assert.NotNil(t, got, "%s: condition %s", st.Name, c.typ) {
			continue
		}
		assert.Equal(t, c.status, got.Status, "%s: %s status", st.Name, c.typ)
		assert.Equal(t, c.reason, got.Reason, "%s: %s reason", st.Name, c.typ)
		assert.Equal(t, st.Generation, got.ObservedGeneration, "%s: %s observedGeneration", st.Name, c.typ)
		assert.NotZero(t, st.Generation)
		assert.Regexp(t, aSentence, got.Message, "%s: %s message", st.Name, c.typ)
		assert.False(t, got.LastTransitionTime.IsZero(), "%s: %s lastTransitionTime", st.Name, c.typ)
	}
	assert.Len(t, st.Status.Conditions, 3, "%s: Ready, Progressing and Degraded only", st.Name)
}

func hasCondition(st *v1alpha1.SandboxGPUNode, typ string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(st.Status.Conditions, typ)
	return c != nil && c.Status == status && c.Reason == reason
}

// Each state of the state machine shows in the conditions, so that
// `kubectl wait --for=condition=Ready sandboxgpunode/<node>` works.
func TestNodeConditionsFollowTheStateMachine(t *testing.T) {
	clk := newClock()
	c := startTest(t, clk, "container", drainAfter(time.Minute))
	newNode(t, c, "c-walk", map[string]string{names.WorkloadConfigLabel: "container"})

	st := waitState(t, c, "c-walk", "configuring", func(s *v1alpha1.SandboxGPUNode) bool {
		return s.Status.State == v1alpha1.StateConfiguring && hasCondition(s, v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonConfiguring)
	})
	checkConditions(t, st, wantConditions{metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, ReasonConfiguring, ReasonConfiguring, ReasonAsExpected})
	assert.Contains(t, meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionProgressing).Message, names.NRIPlugin, "names what it waits for")

	readyOperands(t, c, "c-walk", containerOps...)
	st = waitState(t, c, "c-walk", "Ready=True", func(s *v1alpha1.SandboxGPUNode) bool {
		return hasCondition(s, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonOperandsReady)
	})
	assert.Equal(t, v1alpha1.StateReady, st.Status.State)
	checkConditions(t, st, wantConditions{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionFalse, ReasonOperandsReady, ReasonConfigApplied, ReasonAsExpected})
	readySince := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionReady).LastTransitionTime

	gpuPod(t, c, "c-walk", "nvidia.com/gpu")
	setNodeLabel(t, c, "c-walk", names.WorkloadConfigLabel, "vm-passthrough")
	st = waitState(t, c, "c-walk", "draining", func(s *v1alpha1.SandboxGPUNode) bool {
		return hasCondition(s, v1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonDraining)
	})
	assert.Equal(t, v1alpha1.StateDraining, st.Status.State)
	checkConditions(t, st, wantConditions{metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, ReasonDraining, ReasonDraining, ReasonAsExpected})
	assert.Contains(t, meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionReady).Message, "default/train-c-walk")
	assert.False(t, meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionReady).LastTransitionTime.Before(&readySince),
		"Ready's lastTransitionTime moves when it turns False")
	require.NotNil(t, st.Status.Transition)
	assert.Equal(t, v1alpha1.ConfigTransition{From: "container", To: "vm-passthrough", Started: st.Status.Transition.Started}, *st.Status.Transition)

	clk.advance(2 * time.Minute)
	st = waitState(t, c, "c-walk", "Degraded=True", func(s *v1alpha1.SandboxGPUNode) bool {
		return hasCondition(s, v1alpha1.ConditionDegraded, metav1.ConditionTrue, ReasonDrainTimedOut)
	})
	assert.Equal(t, v1alpha1.StateFailed, st.Status.State)
	checkConditions(t, st, wantConditions{metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionTrue, ReasonDrainTimedOut, ReasonDrainTimedOut, ReasonDrainTimedOut})
	degraded := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionDegraded)
	assert.Equal(t, "The drain from container to vm-passthrough timed out after 1m0s with 1 GPU pod still running: default/train-c-walk.", degraded.Message)

	// The failure holds while the GPU pod runs (it used to fall back to
	// draining at the next requeue).
	before := reconciles(t, nodeControllerName)
	testutil.Eventually(t, wait, "more reconciles of the failed node", func() bool { return reconciles(t, nodeControllerName) >= before+5 })
	assert.Equal(t, v1alpha1.StateFailed, nodeState(c, "c-walk").Status.State)
}

// A node the state machine has not stepped yet is pending.
func TestNodeConditionsOfAPendingNode(t *testing.T) {
	st := &v1alpha1.SandboxGPUNode{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 3}}
	st.Status.WorkloadConfig = "vm-vgpu"
	setNodeConditions(st, "", "", time.Now())
	checkConditions(t, st, wantConditions{metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionFalse, ReasonPending, ReasonPending, ReasonAsExpected})

	st.Status.State = v1alpha1.StateFailed // a failure whose cause this reconcile did not see keeps the recorded one
	setNodeConditions(st, "", ReasonDrainTimedOut, time.Now())
	setNodeConditions(st, "", "", time.Now())
	assert.Equal(t, ReasonDrainTimedOut, meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionDegraded).Reason)
}

// The status is written by a merge patch without a resourceVersion: a
// write in between (here: an annotation added just before the operator's
// first status write of the node) does not make it fail, and the operator
// never sends an update of a status.
func TestStatusIsPatchedNotUpdated(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	setPolicy(t, c, sandboxOn("container"))
	// The hook runs on the operator's goroutines: it records, the test asserts.
	var mu sync.Mutex
	var staleRV, freshRV string
	var touchErr error
	cfg := operatorConfig{beforeStatusPatch: func(obj client.Object) {
		st, ok := obj.(*v1alpha1.SandboxGPUNode)
		mu.Lock()
		defer mu.Unlock()
		if !ok || st.Name != "c-stale" || staleRV != "" {
			return
		}
		staleRV = st.ResourceVersion
		fresh := nodeState(c, st.Name)
		if fresh == nil {
			touchErr = fmt.Errorf("SandboxGPUNode %s not found", st.Name)
			return
		}
		patch := client.MergeFrom(fresh.DeepCopy())
		fresh.Annotations = map[string]string{"example.com/touched": "yes"}
		touchErr = c.Patch(context.Background(), fresh, patch)
		freshRV = fresh.ResourceVersion
	}}
	op := startOperatorWith(t, newClock(), cfg)
	newNode(t, c, "c-stale", nil)
	readyOperands(t, c, "c-stale", containerOps...)
	st := waitState(t, c, "c-stale", "ready", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })
	mu.Lock()
	require.NoError(t, touchErr)
	require.NotEmpty(t, staleRV, "the hook ran")
	require.NotEqual(t, staleRV, freshRV, "the operator's copy was stale when it wrote")
	mu.Unlock()
	assert.Equal(t, "yes", st.Annotations["example.com/touched"], "the other write stays")

	// The state can read ready before the patch that wrote it has returned
	// to the operator (one status patch may bring a node from nothing to
	// ready): wait for its result.
	var updates int
	var errs []error
	testutil.Eventually(t, wait, "the operator's status patch returned", func() bool {
		var patches int
		updates, patches, errs = op.writes.get()
		return patches > 0
	})
	assert.Zero(t, updates, "no status update")
	require.NotEmpty(t, errs)
	assert.NoError(t, errs[0], "the first status write, from a stale copy, succeeds")
	for i, err := range errs {
		assert.NoError(t, err, "status patch %d", i)
	}
}
