package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// Reasons of the SandboxGPUNode conditions (CamelCase, after cluster-api's
// conventions: the reason of a progressing node is its step).
const (
	ReasonPending       = "Pending"
	ReasonDraining      = "Draining"
	ReasonReleasing     = "Releasing"
	ReasonConfiguring   = "Configuring"
	ReasonDrainTimedOut = "DrainTimedOut"
	// ReasonReleaseTimedOut: the release of the config left (a GPU or vGPU
	// in use) did not finish within the policy's drain timeout.
	ReasonReleaseTimedOut = "ReleaseTimedOut"
	// ReasonReleased: the policy is being deleted and the node's GPUs are
	// returned.
	ReasonReleased      = "Released"
	ReasonOperandsReady = "OperandsReady"
	ReasonConfigApplied = "ConfigApplied"
	ReasonAsExpected    = "AsExpected"
	reasonFailed        = "Failed" // a failed node whose cause is not known (yet)
)

// stepReasons are the Progressing reasons of the states on the way to ready.
var stepReasons = map[string]string{
	v1alpha1.StatePending:     ReasonPending,
	v1alpha1.StateDraining:    ReasonDraining,
	v1alpha1.StateReleasing:   ReasonReleasing,
	v1alpha1.StateConfiguring: ReasonConfiguring,
}

// setNodeConditions sets Ready, Progressing and Degraded from the state the
// state machine reached:
//
//	ready:                        Ready=True   Progressing=False  Degraded=False
//	pending, draining, releasing, configuring: Ready=False  Progressing=True (reason: the step)  Degraded=False
//	failed:                       Ready=False  Progressing=False  Degraded=True (reason: the cause)
//	released (uninstall):         Ready=False  Progressing=False  Degraded=False (reason Released)
//
// msg is the sentence that explains the state (what a step waits for, what
// failed); failReason is the cause of a failure, "" to keep the one already
// recorded. Each condition carries the object's generation; a condition's
// lastTransitionTime moves only when its status changes.
func setNodeConditions(st *v1alpha1.SandboxGPUNode, msg, failReason string, now time.Time) {
	s := &st.Status
	if msg == "" {
		msg = defaultStateMessage(s)
	}
	cond := func(t string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: message,
			ObservedGeneration: st.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	notDegraded := func() {
		cond(v1alpha1.ConditionDegraded, metav1.ConditionFalse, ReasonAsExpected, "Nothing has failed.")
	}
	switch s.State {
	case v1alpha1.StateReady:
		cond(v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonOperandsReady, msg)
		cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonConfigApplied, sentence("the node runs its desired config "+s.AppliedConfig))
		notDegraded()
	case v1alpha1.StateReleased:
		cond(v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonReleased, msg)
		cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonReleased, msg)
		notDegraded()
	case v1alpha1.StateFailed:
		if failReason == "" {
			failReason = reasonFailed
			if d := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionDegraded); d != nil && d.Status == metav1.ConditionTrue {
				failReason = d.Reason
			}
		}
		cond(v1alpha1.ConditionReady, metav1.ConditionFalse, failReason, msg)
		cond(v1alpha1.ConditionProgressing, metav1.ConditionFalse, failReason, msg)
		cond(v1alpha1.ConditionDegraded, metav1.ConditionTrue, failReason, msg)
	default:
		reason := stepReasons[s.State]
		if reason == "" { // a new node, before its first step
			reason = ReasonPending
		}
		cond(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
		cond(v1alpha1.ConditionProgressing, metav1.ConditionTrue, reason, msg)
		notDegraded()
	}
}

// defaultStateMessage explains a state when the step said nothing (a ready
// node, or a step cut short by an API error that is retried).
func defaultStateMessage(s *v1alpha1.SandboxGPUNodeStatus) string {
	switch s.State {
	case v1alpha1.StateReady:
		return sentence("the node runs " + s.AppliedConfig + " and its operands are ready")
	case v1alpha1.StateDraining:
		return sentence("the node is draining GPU pods of " + s.AppliedConfig + " before it switches to " + s.WorkloadConfig)
	case v1alpha1.StateReleasing:
		return sentence("the node returns the host state of " + s.AppliedConfig + " before it switches to " + s.WorkloadConfig)
	case v1alpha1.StateConfiguring:
		return sentence("the node is being configured for " + s.WorkloadConfig)
	case v1alpha1.StateReleased:
		return "The policy is being deleted: the node's GPUs are returned to their host drivers and no operand runs there."
	case v1alpha1.StateFailed:
		return "The node failed to switch to " + s.WorkloadConfig + "."
	}
	return "The node waits to be configured."
}
