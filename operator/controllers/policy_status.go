package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// Reasons of the policy's Ready and Degraded conditions.
const (
	ReasonAllNodesReady      = "AllNodesReady"
	ReasonNodesNotReady      = "NodesNotReady"
	ReasonNoGPUNodes         = "NoGPUNodes"
	ReasonOperandsFailed     = "OperandsFailed"
	ReasonNodesFailed        = "NodesFailed"
	ReasonIntegrationMissing = "IntegrationMissing"
)

// noGPUNodesMessage says that no GPU node was found and how one is known.
var noGPUNodesMessage = fmt.Sprintf("No GPU node was found: a node counts as one when it is labelled %s=true "+
	"(the GPU discovery agent does that from sysfs unless spec.gpuDiscovery turns it off) or Node Feature Discovery labels it "+
	"feature.node.kubernetes.io/pci-10de.present=true (NVIDIA's PCI vendor id).", names.GPUPresentLabel)

// summarize counts GPU nodes per config and sets Ready and Degraded, with
// messages that are sentences naming the nodes and operands concerned.
func (r *PolicyReconciler) summarize(ctx context.Context, p *v1alpha1.SandboxGPUPolicy, errs []*operandError, problems []string) error {
	var nodes v1alpha1.SandboxGPUNodeList
	if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil { // read only
		return fmt.Errorf("list node states: %w", err)
	}
	c, notReady, failed := countNodes(nodes.Items)
	problems = append(problems, unsupportedNodes(nodes.Items, p)...)
	p.Status.Nodes = c
	p.Status.ObservedGeneration = p.Generation
	ready, degraded := policyConditions(len(nodes.Items), c, notReady, failed, errs, problems)
	ready.ObservedGeneration, degraded.ObservedGeneration = p.Generation, p.Generation
	meta.SetStatusCondition(&p.Status.Conditions, ready)
	meta.SetStatusCondition(&p.Status.Conditions, degraded)
	return nil
}

// countNodes counts the nodes per config and names the ones not ready
// ("gpu-3 (draining)") and the failed ones, sorted.
func countNodes(nodes []v1alpha1.SandboxGPUNode) (c v1alpha1.NodeCounts, notReady, failed []string) {
	for _, n := range nodes {
		switch n.Status.WorkloadConfig {
		case v1alpha1.WorkloadContainer:
			c.Container++
		case v1alpha1.WorkloadVMPassthrough:
			c.VMPassthrough++
		case v1alpha1.WorkloadVMVGPU:
			c.VMVGPU++
		}
		switch n.Status.State {
		case v1alpha1.StateReady:
			c.Ready++
			continue
		case v1alpha1.StateFailed:
			c.Failed++
			failed = append(failed, n.Name)
		}
		state := n.Status.State
		if state == "" {
			state = v1alpha1.StatePending
		}
		notReady = append(notReady, n.Name+" ("+state+")")
	}
	sort.Strings(notReady)
	sort.Strings(failed)
	return c, notReady, failed
}

// policyConditions derives Ready and Degraded. Ready needs at least one
// GPU node, every one of them ready and every operand applied.
func policyConditions(total int, c v1alpha1.NodeCounts, notReady, failed []string, errs []*operandError, problems []string) (ready, degraded metav1.Condition) {
	opFailures := operandFailures(errs)
	ready = metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse}
	switch {
	case total == 0:
		ready.Reason, ready.Message = ReasonNoGPUNodes, noGPUNodesMessage
	case int(c.Ready) < total:
		ready.Reason = ReasonNodesNotReady
		ready.Message = fmt.Sprintf("%d of %s %s ready; not ready: %s.", c.Ready, plural(total, "GPU node"), isAre(int(c.Ready)), nameList(notReady))
	case len(errs) > 0:
		ready.Reason = ReasonOperandsFailed
		ready.Message = fmt.Sprintf("All %s %s ready, but not every operand could be applied.", plural(total, "GPU node"), isAre(total))
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, ReasonAllNodesReady
		ready.Message = fmt.Sprintf("All %s %s ready.", plural(total, "GPU node"), isAre(total))
		if total == 1 {
			ready.Message = "The GPU node is ready."
		}
	}
	if len(errs) > 0 && ready.Reason != ReasonOperandsFailed {
		ready.Message = sentences(ready.Message, "Not every operand could be applied either.")
	}

	degraded = metav1.Condition{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: ReasonAsExpected,
		Message: "No GPU node or operand has failed."}
	var why []string
	if len(failed) > 0 {
		degraded.Reason = ReasonNodesFailed
		why = append(why, fmt.Sprintf("%d of %s failed: %s.", len(failed), plural(total, "GPU node"), nameList(failed)))
	}
	if len(opFailures) > 0 {
		if len(why) == 0 {
			degraded.Reason = ReasonOperandsFailed
		}
		why = append(why, opFailures...)
	}
	if len(problems) > 0 {
		if len(why) == 0 {
			degraded.Reason = ReasonIntegrationMissing
		}
		why = append(why, problems...)
	}
	if len(why) > 0 {
		degraded.Status, degraded.Message = metav1.ConditionTrue, sentences(why...)
	}
	return ready, degraded
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// unsupportedNodes says which nodes ask for a workload config the policy's
// mode cannot serve (vm-vgpu in Kata mode), one sentence per config.
func unsupportedNodes(nodes []v1alpha1.SandboxGPUNode, p *v1alpha1.SandboxGPUPolicy) []string {
	byConfig := map[string][]string{}
	for _, n := range nodes {
		if d := meta.FindStatusCondition(n.Status.Conditions, v1alpha1.ConditionDegraded); d != nil && d.Reason == ReasonUnsupportedConfig {
			byConfig[n.Status.WorkloadConfig] = append(byConfig[n.Status.WorkloadConfig], n.Name)
		}
	}
	var out []string
	for _, config := range slices.Sorted(maps.Keys(byConfig)) {
		ns := byConfig[config]
		sort.Strings(ns)
		what := "Node " + nameList(ns) + " asks"
		if len(ns) > 1 {
			what = "Nodes " + nameList(ns) + " ask"
		}
		out = append(out, fmt.Sprintf("%s for %s, which %s mode cannot serve, so %s not set up for it.", what, config, workload.Mode(p), itThey(len(ns))))
	}
	return out
}

func itThey(n int) string {
	if n == 1 {
		return "it is"
	}
	return "they are"
}
