// Package uninstall is `sandbox-gpu-operator uninstall`, the Helm chart's
// pre-delete hook: it deletes the SandboxGPUPolicy while the operator still
// runs, and waits until the operator has returned every GPU the product
// moved (the policy's finalizer goes once every GPU node is released). The
// operator never touches a GPU in use: what stays is reported, in the
// output and as a Warning event on each Node concerned. At the timeout it
// removes the finalizer itself, so that the uninstall can go on, and
// reports what it leaves.
package uninstall

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// PolicyName is the one policy.
const PolicyName = "default"

// EventLeft is the reason of the Warning event on a Node whose GPUs the
// uninstall could not all return.
const EventLeft = "UninstallLeftGPUs"

// Options tune Run.
type Options struct {
	// Timeout bounds the wait for the operator (default 4m: under Helm's
	// default --timeout of 5m, which bounds the hook).
	Timeout time.Duration
	// Poll is how often the node states are read (default 2s).
	Poll time.Duration
}

// Node is a node's state when it was last seen.
type Node struct {
	Name, State, Message string
}

// Result is what an uninstall did.
type Result struct {
	// Released are the nodes whose GPUs are back, by name.
	Released []string
	// Left are the nodes not released (what stays, and why), by name.
	Left []Node
	// TimedOut: the operator did not finish in time; the finalizer was
	// removed by the uninstall.
	TimedOut bool
}

// Run deletes the policy and waits for its release, writing progress and
// the outcome to out as sentences.
func Run(ctx context.Context, c client.Client, o Options, out io.Writer) (*Result, error) {
	if o.Timeout <= 0 {
		o.Timeout = 4 * time.Minute
	}
	if o.Poll <= 0 {
		o.Poll = 2 * time.Second
	}
	key := client.ObjectKey{Name: PolicyName}
	p := &v1alpha1.SandboxGPUPolicy{}
	if err := c.Get(ctx, key, p); apierrors.IsNotFound(err) {
		fmt.Fprintf(out, "No SandboxGPUPolicy %s: nothing to release.\n", PolicyName)
		return &Result{}, nil
	} else if err != nil {
		return nil, fmt.Errorf("policy %s: get: %w", PolicyName, err)
	}
	if p.DeletionTimestamp.IsZero() {
		if err := c.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("policy %s: delete: %w", PolicyName, err)
		}
		fmt.Fprintf(out, "Deleted SandboxGPUPolicy %s: the operator returns every GPU the product moved to its host driver and removes every vGPU, never one in use.\n", PolicyName)
	}
	seen := map[string]Node{}
	deadline := time.Now().Add(o.Timeout)
	tick := time.NewTicker(o.Poll)
	defer tick.Stop()
	for {
		if err := observe(ctx, c, seen, out); err != nil {
			return nil, err
		}
		err := c.Get(ctx, key, p)
		if apierrors.IsNotFound(err) {
			// The operator removes the finalizer only once every node is
			// released, maybe since the last look: look once more. A state
			// already collected with the policy was released.
			final := map[string]Node{}
			if err := observe(ctx, c, final, io.Discard); err != nil {
				return nil, err
			}
			for name := range seen {
				n, ok := final[name]
				if !ok {
					n = seen[name]
					n.State = v1alpha1.StateReleased
				}
				seen[name] = n
			}
			res := result(seen)
			fmt.Fprintf(out, "The policy is gone: %s.\n", summary(res))
			return res, nil
		}
		if err != nil {
			return nil, fmt.Errorf("policy %s: get: %w", PolicyName, err)
		}
		if !time.Now().Before(deadline) {
			return timedOut(ctx, c, p, seen, o.Timeout, out)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("policy %s: waiting for the release: %w", PolicyName, ctx.Err())
		case <-tick.C:
		}
	}
}

// observe reads every node state, remembers it and writes a line for each
// that changed.
func observe(ctx context.Context, c client.Client, seen map[string]Node, out io.Writer) error {
	var states v1alpha1.SandboxGPUNodeList
	if err := c.List(ctx, &states); err != nil {
		return fmt.Errorf("list node states: %w", err)
	}
	sort.Slice(states.Items, func(i, j int) bool { return states.Items[i].Name < states.Items[j].Name })
	for _, st := range states.Items {
		n := Node{Name: st.Name, State: st.Status.State, Message: st.Status.Message}
		if n.State == "" {
			n.State = v1alpha1.StatePending
		}
		if old, ok := seen[n.Name]; ok && old == n {
			continue
		}
		seen[n.Name] = n
		line := fmt.Sprintf("Node %s: %s", n.Name, n.State)
		if n.Message != "" && n.State != v1alpha1.StateReleased {
			line += ": " + n.Message
		}
		fmt.Fprintln(out, strings.TrimSpace(line))
	}
	return nil
}

func result(seen map[string]Node) *Result {
	res := &Result{}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if n := seen[name]; n.State == v1alpha1.StateReleased {
			res.Released = append(res.Released, name)
		} else {
			res.Left = append(res.Left, n)
		}
	}
	return res
}

func summary(res *Result) string {
	s := fmt.Sprintf("%d %s released", len(res.Released), nodes(len(res.Released)))
	if len(res.Left) > 0 {
		var left []string
		for _, n := range res.Left {
			left = append(left, n.Name+" ("+n.State+")")
		}
		s += fmt.Sprintf("; not released: %s", strings.Join(left, ", "))
	}
	return s
}

func nodes(n int) string {
	if n == 1 {
		return "GPU node"
	}
	return "GPU nodes"
}

// timedOut reports what stays (output and a Warning event per node) and
// removes the finalizer so that the uninstall goes on.
func timedOut(ctx context.Context, c client.Client, p *v1alpha1.SandboxGPUPolicy, seen map[string]Node, timeout time.Duration, out io.Writer) (*Result, error) {
	res := result(seen)
	res.TimedOut = true
	fmt.Fprintf(out, "The operator did not release every GPU node within %s; what it could not return stays as it is (never a GPU in use is touched):\n", timeout)
	for _, n := range res.Left {
		fmt.Fprintf(out, "  %s (%s): %s\n", n.Name, n.State, n.Message)
		if err := leftEvent(ctx, c, n, timeout); err != nil {
			fmt.Fprintf(out, "  (no event on Node %s: %v)\n", n.Name, err)
		}
	}
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if controllerutil.RemoveFinalizer(p, v1alpha1.ReleaseFinalizer) {
		if err := c.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("policy %s: remove finalizer %s: %w", PolicyName, v1alpha1.ReleaseFinalizer, err)
		}
	}
	fmt.Fprintf(out, "Removed the policy's finalizer %s so that the uninstall goes on: %s.\n", v1alpha1.ReleaseFinalizer, summary(res))
	return res, nil
}

// leftEvent is a Warning event on the Node saying what the uninstall left.
func leftEvent(ctx context.Context, c client.Client, n Node, timeout time.Duration) error {
	node := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: n.Name}, node); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: n.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: node.UID, APIVersion: "v1"},
		Reason:         EventLeft, Type: corev1.EventTypeWarning,
		Message: fmt.Sprintf("sandbox-gpu was uninstalled without returning everything on node %s within %s (%s): %s", n.Name, timeout, n.State, n.Message),
		Source:  corev1.EventSource{Component: "sandbox-gpu-uninstall"}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "sandbox-gpu.io/uninstall", ReportingInstance: "sandbox-gpu-uninstall",
	}
	if err := c.Create(ctx, ev); err != nil {
		return fmt.Errorf("node %s: event: %w", n.Name, err)
	}
	return nil
}
