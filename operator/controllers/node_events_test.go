package controllers

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// operatorEvents lists the operator's events regarding a node, by reason.
func operatorEvents(t *testing.T, c client.Client, node string) map[string][]eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(metav1.NamespaceDefault)))
	// Only this Node's: an earlier run's Node of the same name (go test
	// -count=2, one API server) left its events behind.
	var n corev1.Node
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: node}, &n))
	out := map[string][]eventsv1.Event{}
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Regarding.UID == n.UID && e.ReportingController == "sandbox-gpu-operator" {
			out[e.Reason] = append(out[e.Reason], e)
		}
	}
	return out
}

// waitEvent waits until the node has an event of reason.
func waitEvent(t *testing.T, c client.Client, node, reason string, n int) {
	t.Helper()
	testutil.Eventually(t, wait, node+": "+reason+" event", func() bool { return len(operatorEvents(t, c, node)[reason]) >= n })
}

// moreReconciles runs do (if any) and waits until the node controller has
// reconciled n more times: requeues or wake-ups that must not repeat an
// event.
func moreReconciles(t *testing.T, n float64, do ...func()) {
	t.Helper()
	before := reconciles(t, nodeControllerName)
	for _, f := range do {
		f()
	}
	testutil.Eventually(t, wait, "more reconciles", func() bool { return reconciles(t, nodeControllerName) >= before+n })
}

// A whole walk through the state machine: one event per step, however
// often the node is reconciled in between.
func TestEventsOncePerTransition(t *testing.T) {
	clk := newClock()
	c := startTest(t, clk, "container", drainAfter(time.Minute))
	const node = "e-walk"
	newNode(t, c, node, map[string]string{names.WorkloadConfigLabel: "container"})
	waitEvent(t, c, node, EventConfiguring, 1)
	readyOperands(t, c, node, containerOps...)
	waitEvent(t, c, node, EventReady, 1)

	pod := gpuPod(t, c, node, "nvidia.com/gpu")
	setNodeLabel(t, c, node, names.WorkloadConfigLabel, "vm-passthrough")
	waitEvent(t, c, node, EventConfigChanged, 1)
	moreReconciles(t, 10) // draining requeues

	clk.advance(2 * time.Minute)
	waitEvent(t, c, node, EventDrainTimedOut, 1)
	moreReconciles(t, 10) // failed requeues

	require.NoError(t, c.Delete(context.Background(), pod, client.GracePeriodSeconds(0)))
	waitEvent(t, c, node, EventConfiguring, 2)
	readyOperands(t, c, node, names.KubeVirtDevicePlugin, names.Validator, names.VFIOManager)
	waitEvent(t, c, node, EventReady, 2)
	moreReconciles(t, 3, func() { // ready: reconciles that change nothing
		for i := range 3 {
			setNodeLabel(t, c, node, "unrelated.example/touch", string(rune('a'+i)))
		}
	})

	evs := operatorEvents(t, c, node)
	got := map[string]int{}
	for reason, list := range evs {
		got[reason] = len(list)
		for _, e := range list {
			assert.Nil(t, e.Series, "%s: a repeated event (series of %v)", reason, e.Series)
			assert.Regexp(t, aSentence, e.Note, reason)
			assert.Contains(t, e.Note, node, "%s names the node", reason)
			require.NotNil(t, e.Related, reason)
			assert.Equal(t, "SandboxGPUNode", e.Related.Kind, reason)
			assert.Equal(t, node, e.Related.Name, reason)
			assert.NotEmpty(t, e.Action, reason)
		}
	}
	assert.Equal(t, map[string]int{EventConfiguring: 2, EventReady: 2, EventConfigChanged: 1, EventDrainTimedOut: 1}, got)

	notes := func(reason string) []string {
		var out []string
		for _, e := range evs[reason] {
			out = append(out, e.Note)
		}
		return out
	}
	assert.Contains(t, notes(EventConfiguring), "Node e-walk is being set up for container: deploy labels set for nri-plugin and nvidia-device-plugin.")
	assert.Contains(t, notes(EventConfiguring),
		"Node e-walk switches from container to vm-passthrough: deploy labels set for kubevirt-device-plugin, validator and vfio-manager, the operands of container are paused.")
	assert.Equal(t, []string{"Workload config of node e-walk changes from container to vm-passthrough: draining started; waiting for 1 GPU pod of container to finish (default/train-e-walk)."},
		notes(EventConfigChanged))
	assert.Equal(t, []string{"Node e-walk could not switch from container to vm-passthrough: the drain timed out after 1m0s with 1 GPU pod still running (default/train-e-walk)."},
		notes(EventDrainTimedOut))
	assert.Equal(t, corev1.EventTypeWarning, evs[EventDrainTimedOut][0].Type)
	for _, r := range []string{EventConfiguring, EventReady, EventConfigChanged} {
		for _, e := range evs[r] {
			assert.Equal(t, corev1.EventTypeNormal, e.Type, r)
		}
	}
	switched := regexp.MustCompile(`^Node e-walk is ready with vm-passthrough, switched from container in 2m\d+s\.$`)
	var found bool
	for _, n := range notes(EventReady) {
		found = found || switched.MatchString(n)
	}
	assert.True(t, found, "the Ready event of the switch says how long it took: %q", notes(EventReady))
}

// With drain.evict, each GPU pod is evicted once, with an event related to
// the pod; the pod being on its way out is not evicted again.
func TestEvictionEventsOncePerPod(t *testing.T) {
	c := startTest(t, newClock(), "container", func(s *v1alpha1.SandboxGPUPolicySpec) { s.Drain.Evict = true })
	const node = "e-evict"
	newNode(t, c, node, map[string]string{names.WorkloadConfigLabel: "container"})
	waitState(t, c, node, "applied", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.AppliedConfig == "container" })
	gpuPod(t, c, node, "nvidia.com/gpu")
	setNodeLabel(t, c, node, names.WorkloadConfigLabel, "vm-passthrough")
	waitEvent(t, c, node, EventEvicted, 1)
	moreReconciles(t, 10) // the pod terminates (no kubelet here: for ever); the node keeps draining
	evs := operatorEvents(t, c, node)
	require.Len(t, evs[EventEvicted], 1)
	e := evs[EventEvicted][0]
	assert.Nil(t, e.Series)
	assert.Equal(t, corev1.EventTypeNormal, e.Type)
	assert.Equal(t, "Evict", e.Action)
	require.NotNil(t, e.Related)
	assert.Equal(t, "Pod", e.Related.Kind)
	assert.Equal(t, "train-"+node, e.Related.Name)
	assert.Equal(t, "Evicted GPU pod default/train-e-evict from node e-evict, which switches from container to vm-passthrough.", e.Note)
	assert.Len(t, evs[EventConfigChanged], 1)
	assert.Contains(t, evs[EventConfigChanged][0].Note, "evicting 1 GPU pod of container first (default/train-e-evict)")
	assert.Empty(t, evs[EventEvictionFailed])
}
