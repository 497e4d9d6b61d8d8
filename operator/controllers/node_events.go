package controllers

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// Event reasons of the node state machine. Events regard the Node and are
// related to its SandboxGPUNode (an eviction: to the pod).
const (
	EventInvalidConfig  = "InvalidWorkloadConfig"
	EventConfigChanged  = "ConfigChanged"
	EventEvicted        = "Evicted"
	EventEvictionFailed = "EvictionFailed"
	EventDrainTimedOut  = "DrainTimedOut"
	// EventQueued: the node waits for a transition slot.
	EventQueued = "TransitionQueued"
	// EventReleasing: the release of the config left started.
	EventReleasing = "Releasing"
	// EventReleaseRefused (Warning): the release reports a GPU or vGPU it
	// must not touch (in use, allocated), once per reason.
	EventReleaseRefused = "ReleaseRefused"
	// EventReleaseTimedOut (Warning): the release did not finish within
	// the drain timeout.
	EventReleaseTimedOut = "ReleaseTimedOut"
	// EventReleased: the release is done (an uninstall: the node's GPUs
	// are returned and its operands gone).
	EventReleased         = "Released"
	EventConfiguring      = "Configuring"
	EventOperandsNotReady = "OperandsNotReady"
	// EventWaitingForDriver: operands of the new config wait until the node
	// reports the NVIDIA driver it needs (the operator changes drivers).
	EventWaitingForDriver = "WaitingForDriver"
	EventReady            = "Ready"
)

// nodeEvent is one event of a node's state machine.
type nodeEvent struct {
	warning              bool
	reason, action, note string
}

// nodeReport collects what one reconcile of a node reports once the status
// that records its steps is written: the events of the steps taken, the
// cause of a failure, a completed transition for the metrics. Waiting for
// the write means a step whose write failed is retried from the old state
// and reported then, once: requeues that take no step report nothing.
type nodeReport struct {
	node       string
	events     []nodeEvent
	failReason string
	completed  *v1alpha1.ConfigTransition
}

func (rep *nodeReport) add(warning bool, reason, action, note string) {
	rep.events = append(rep.events, nodeEvent{warning, reason, action, note})
}

func (rep *nodeReport) invalidConfig(msg string) {
	rep.add(true, EventInvalidConfig, "ReadLabel", msg)
}

// configChanged: a new config was seen; the drain of the old one starts.
func (rep *nodeReport) configChanged(from, to string, holders []corev1.Pod, evict bool) {
	note := fmt.Sprintf("Workload config of node %s changes from %s to %s: ", rep.node, from, to)
	switch {
	case len(holders) == 0:
		note += fmt.Sprintf("no GPU pod of %s runs there, so its operands switch now.", from)
	case evict:
		note += fmt.Sprintf("evicting %s of %s first (%s).", plural(len(holders), "GPU pod"), from, nameList(podNames(holders)))
	default:
		note += fmt.Sprintf("draining started; waiting for %s of %s to finish (%s).", plural(len(holders), "GPU pod"), from, nameList(podNames(holders)))
	}
	rep.add(false, EventConfigChanged, "Drain", note)
}

func (rep *nodeReport) drainTimedOut(from, to string, timeout time.Duration, holders []corev1.Pod) {
	rep.failReason = ReasonDrainTimedOut
	rep.add(true, EventDrainTimedOut, "Drain", fmt.Sprintf("Node %s could not switch from %s to %s: the drain timed out after %s with %s still running (%s).",
		rep.node, from, to, timeout, plural(len(holders), "GPU pod"), nameList(podNames(holders))))
}

// queued: the config changed, but other nodes hold every transition slot.
func (rep *nodeReport) queued(from, to string, changing, limit int) {
	rep.add(false, EventQueued, "Drain", fmt.Sprintf("Node %s waits to switch from %s to %s: %d of %d %s changing (spec.transition.maxUnavailable).",
		rep.node, from, to, changing, limit, nodesAre(limit)))
}

// releasing: the operand that made the old config's host state gave way to
// its release.
func (rep *nodeReport) releasing(from, to, rel string) {
	what, _ := releaseWork(rel)
	if to == "" {
		rep.add(false, EventReleasing, "Release", fmt.Sprintf("Node %s is being uninstalled: %s leaves, %s (never one in use).", rep.node, from, what))
		return
	}
	rep.add(false, EventReleasing, "Release", fmt.Sprintf("Node %s leaves %s for %s: %s (never one in use) before the operands of %s start.", rep.node, from, to, what, to))
}

// releaseWork says what the release rel does on the node, while it runs
// and once it is done: the vGPU device manager's removes the vGPUs and
// disables the VFs, the VFIO manager's gives the GPUs back to their host
// drivers.
func releaseWork(rel string) (doing, done string) {
	if rel == names.VGPUDeviceManager {
		return "its vGPUs are removed and the SR-IOV VFs disabled", "every vGPU is removed and the SR-IOV VFs disabled"
	}
	return "the GPUs go back to their host drivers", "every GPU is back on its host driver"
}

func (rep *nodeReport) releaseRefused(from, rel, why string) {
	rep.add(true, EventReleaseRefused, "Release", fmt.Sprintf("Node %s cannot return everything %s made yet: %s reports: %s.", rep.node, from,
		names.ReleaseOperand(rel), strings.TrimRight(why, ".")))
}

func (rep *nodeReport) releaseTimedOut(from string, timeout time.Duration, rel, why string) {
	rep.failReason = ReasonReleaseTimedOut
	note := fmt.Sprintf("Node %s: the release of %s timed out after %s", rep.node, from, timeout)
	if why != "" {
		note += ": " + strings.TrimRight(why, ".")
	}
	rep.add(true, EventReleaseTimedOut, "Release", note+"; it goes on when the release is done.")
}

func (rep *nodeReport) released(from, to, rel string) {
	_, what := releaseWork(rel)
	if to == "" {
		rep.add(false, EventReleased, "Release", fmt.Sprintf("Node %s released %s: %s.", rep.node, from, what))
		return
	}
	rep.add(false, EventReleased, "Release", fmt.Sprintf("Node %s released %s: %s; the operands of %s start.", rep.node, from, what, to))
}

// uninstalled: the policy is being deleted and nothing of the product is
// left on the node.
func (rep *nodeReport) uninstalled(from string) {
	if from == "" {
		from = "no config"
	}
	rep.add(false, EventReleased, "Uninstall", fmt.Sprintf("Node %s is uninstalled: it ran %s, and no operand or label of sandbox-gpu is left.", rep.node, from))
}

// configuring: the deploy labels were switched to the new config's operands.
func (rep *nodeReport) configuring(from, to string, operands []string) {
	what := "no operand is needed"
	if len(operands) > 0 {
		what = "deploy labels set for " + nameList(operands)
	}
	if from == "" {
		rep.add(false, EventConfiguring, "Configure", fmt.Sprintf("Node %s is being set up for %s: %s.", rep.node, to, what))
		return
	}
	rep.add(false, EventConfiguring, "Configure", fmt.Sprintf("Node %s switches from %s to %s: %s, the operands of %s are paused.", rep.node, from, to, what, from))
}

// operandsNotReady: a node waits for operands again without a config change.
func (rep *nodeReport) operandsNotReady(config string, notReady []string, wasReady bool) {
	if wasReady {
		rep.add(true, EventOperandsNotReady, "Configure", fmt.Sprintf("Node %s is no longer ready: operands of %s are not ready: %s.", rep.node, config, nameList(notReady)))
		return
	}
	rep.add(false, EventConfiguring, "Configure", fmt.Sprintf("Node %s waits for operands of %s to be ready: %s.", rep.node, config, nameList(notReady)))
}

// ready: the node runs its config; t is the transition it completed, if any.
// waitingForDriver: the node changes NVIDIA drivers; operands wait for it.
func (rep *nodeReport) waitingForDriver(config, why string, operands []string) {
	rep.add(false, EventWaitingForDriver, "Configure", fmt.Sprintf("Node %s switches NVIDIA drivers for %s: %s wait for %s.",
		rep.node, config, nameList(operands), why))
}

func (rep *nodeReport) ready(config string, t *v1alpha1.ConfigTransition) {
	note := fmt.Sprintf("Node %s is ready with %s.", rep.node, config)
	if t != nil {
		took := t.Completed.Sub(t.Started.Time).Round(time.Second)
		if t.From == "" {
			note = fmt.Sprintf("Node %s is ready with %s, set up in %s.", rep.node, config, took)
		} else {
			note = fmt.Sprintf("Node %s is ready with %s, switched from %s in %s.", rep.node, config, t.From, took)
		}
		rep.completed = t
	}
	rep.add(false, EventReady, "Configure", note)
}

// send records the collected events regarding the node, related to its
// SandboxGPUNode.
func (r *NodeReconciler) send(node *corev1.Node, st *v1alpha1.SandboxGPUNode, rep *nodeReport) {
	for _, e := range rep.events {
		r.event(node, st, e)
	}
}

func (r *NodeReconciler) event(node *corev1.Node, related runtime.Object, e nodeEvent) {
	if r.Recorder == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if e.warning {
		typ = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(node, related, typ, e.reason, e.action, "%s", e.note)
}

// beginTransition records a change to config to (from the applied config
// from; "" for a new node) unless that change is already in progress, and
// reports whether it began now.
func beginTransition(st *v1alpha1.SandboxGPUNode, from, to string, now time.Time) bool {
	if t := st.Status.Transition; t != nil && t.Completed == nil && t.To == to {
		return false
	}
	st.Status.Transition = &v1alpha1.ConfigTransition{From: from, To: to, Started: metav1.NewTime(now)}
	return true
}

// dropAbandonedTransition forgets a change that was given up (the label
// went back to the applied config before the switch).
func dropAbandonedTransition(st *v1alpha1.SandboxGPUNode) {
	if t := st.Status.Transition; t != nil && t.Completed == nil && t.To != st.Status.AppliedConfig {
		st.Status.Transition = nil
	}
}

// completeTransition marks the change in progress done, returning it; nil
// when none was in progress.
func completeTransition(st *v1alpha1.SandboxGPUNode, now time.Time) *v1alpha1.ConfigTransition {
	t := st.Status.Transition
	if t == nil || t.Completed != nil || t.To != st.Status.AppliedConfig {
		return nil
	}
	done := metav1.NewTime(now)
	t.Completed = &done
	return t.DeepCopy()
}

// podNames returns namespace/name of each pod, sorted.
func podNames(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}
