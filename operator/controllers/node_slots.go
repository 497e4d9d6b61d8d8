package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

// transitionSlots bounds how many nodes change config at once
// (spec.transition.maxUnavailable). The count is recomputed from the cache
// at every decision, under one mutex, so concurrent reconciles never
// overshoot; granted remembers the slots handed out whose status write the
// cache may not show yet, waiting the nodes that wait for one (a slot that
// frees wakes them).
type transitionSlots struct {
	mu      sync.Mutex
	granted map[string]bool
	waiting map[string]bool
}

// holdsSlot reports whether a node's status holds a transition slot: a
// change of config (not a new node's first one) in progress, drained,
// released, being configured, or failed on the way (a failed change keeps
// its slot, as an unavailable pod stalls a rolling update, until it is
// fixed or given up).
func holdsSlot(st *v1alpha1.SandboxGPUNode) bool {
	t := st.Status.Transition
	if t == nil || t.Completed != nil || t.From == "" {
		return false
	}
	switch st.Status.State {
	case v1alpha1.StateDraining, v1alpha1.StateReleasing, v1alpha1.StateConfiguring, v1alpha1.StateFailed:
		return true
	}
	return false
}

// maxUnavailable is the policy's transition bound for gpuNodes GPU nodes:
// a number, or a percentage rounded up (as a DaemonSet's); at least 1.
func maxUnavailable(p *v1alpha1.SandboxGPUPolicy, gpuNodes int) int {
	v := intstr.FromInt32(1)
	if m := p.Spec.Transition.MaxUnavailable; m != nil {
		v = *m
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, gpuNodes, true)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// waitForSlot says whether the node, whose config changed, must wait for
// a transition slot (pending, with the message why). It holds one when
// its status says so or one was granted to it; otherwise the free slots go
// to the waiting nodes in the order of their names. A node's first wait
// is one event.
func (r *NodeReconciler) waitForSlot(ctx context.Context, node *corev1.Node, p *v1alpha1.SandboxGPUPolicy, st *v1alpha1.SandboxGPUNode, rep *nodeReport) (bool, string, error) {
	if holdsSlot(st) {
		return false, "", nil
	}
	s := &r.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.granted == nil {
		s.granted, s.waiting = map[string]bool{}, map[string]bool{}
	}
	if s.granted[node.Name] {
		return false, "", nil
	}
	var nodes corev1.NodeList
	// The lists are read only: the cache's objects, not copies.
	if err := r.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return false, "", fmt.Errorf("node %s: list nodes for a transition slot: %w", node.Name, err)
	}
	var states v1alpha1.SandboxGPUNodeList
	if err := r.List(ctx, &states, client.UnsafeDisableDeepCopy); err != nil {
		return false, "", fmt.Errorf("node %s: list node states for a transition slot: %w", node.Name, err)
	}
	byName := make(map[string]*v1alpha1.SandboxGPUNode, len(states.Items))
	for i := range states.Items {
		byName[states.Items[i].Name] = &states.Items[i]
	}
	byName[node.Name] = st // this reconcile's view is the freshest
	gpuNodes := 0
	var changing, waiting []string
	seen := map[string]bool{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if !workload.IsGPUNode(n) {
			continue
		}
		gpuNodes++
		seen[n.Name] = true
		ns := byName[n.Name]
		if ns == nil {
			continue
		}
		desired, _ := workload.Config(n, p)
		wants := ns.Status.AppliedConfig != "" && ns.Status.AppliedConfig != desired && workload.Unsupported(desired, p) == ""
		switch {
		case holdsSlot(ns):
			delete(s.granted, n.Name) // the cache shows the grant
			changing = append(changing, n.Name)
		case s.granted[n.Name] && wants:
			changing = append(changing, n.Name)
		case wants:
			delete(s.granted, n.Name)
			waiting = append(waiting, n.Name)
		default:
			delete(s.granted, n.Name) // given up before its status showed the slot
		}
	}
	for name := range s.granted {
		if !seen[name] {
			delete(s.granted, name) // the node is gone
		}
	}
	limit := maxUnavailable(p, gpuNodes)
	slices.Sort(waiting)
	if i := slices.Index(waiting, node.Name); i >= 0 && i < limit-len(changing) {
		s.granted[node.Name] = true
		delete(s.waiting, node.Name)
		return false, "", nil
	}
	s.waiting[node.Name] = true
	slices.Sort(changing)
	msg := fmt.Sprintf("Waiting for a transition slot: %d of %d %s changing (%s); spec.transition.maxUnavailable allows %d at once.",
		len(changing), limit, nodesAre(limit), nameList(changing), limit)
	if r.setState(st, v1alpha1.StatePending) {
		rep.queued(st.Status.AppliedConfig, st.Status.WorkloadConfig, len(changing), limit)
	}
	return true, msg, nil
}

func nodesAre(n int) string {
	if n == 1 {
		return "node is"
	}
	return "nodes are"
}

// slotWaiters are the nodes waiting for a transition slot: a node state
// that changes may have freed one.
func (r *NodeReconciler) slotWaiters(_ context.Context, o client.Object) []reconcile.Request {
	out := []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
	s := &r.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.waiting {
		if name != o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
	}
	return out
}

// forgetSlot drops what the slots know of a node that is gone, or no
// longer waits.
func (s *transitionSlots) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.granted, name)
	delete(s.waiting, name)
}
