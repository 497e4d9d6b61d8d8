package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// operandNamespace is the chart's operator.namespace (created by the chart, labelled privileged).
const operandNamespace = "sandbox-gpu"

// The operator's custom resources.
var (
	nodeStates = schema.GroupVersionResource{Group: "sandbox-gpu.io", Version: "v1alpha1", Resource: "sandboxgpunodes"}
	policies   = schema.GroupVersionResource{Group: "sandbox-gpu.io", Version: "v1alpha1", Resource: "sandboxgpupolicies"}
)

// waitPodReady waits until exactly one pod matching selector in operandNamespace runs on the node
// with every container ready, and returns its name; the error says what the pods were doing, with
// their events and the last lines of their logs.
func waitPodReady(ctx context.Context, c *cluster.Cluster, selector string, within time.Duration) (string, error) {
	var name string
	var last []corev1.Pod
	err := pollTrue(ctx, within, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(operandNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, fmt.Errorf("list pods %s: %w", selector, err)
		}
		last = pods.Items
		if len(pods.Items) != 1 {
			return false, fmt.Errorf("%d pods %s", len(pods.Items), selector)
		}
		p := pods.Items[0]
		name = p.Name
		if p.Spec.NodeName != c.NodeName() || !cluster.PodRunning(&p) || p.DeletionTimestamp != nil {
			return false, fmt.Errorf("pod %s on node %q: phase %s, not ready", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("pod %s in %s Ready: %w%s", selector, operandNamespace, err, describePods(c, last))
	}
	return name, nil
}

// restarts lists the containers of the product's pods (operator and operands) that restarted: under
// a real kubelet a restart means a broken mount, privilege, probe or socket path.
func restarts(ctx context.Context, c *cluster.Cluster) ([]string, error) {
	pods, err := c.Client.CoreV1().Pods(operandNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods in %s: %w", operandNamespace, err)
	}
	var out []string
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				out = append(out, fmt.Sprintf("%s/%s restarted %d times (last: %s)%s", p.Name, cs.Name, cs.RestartCount,
					stateOf(cs.LastTerminationState), describePods(c, []corev1.Pod{p})))
			}
		}
	}
	return out, nil
}

// savePodLogs writes the log of every container of the product's pods to dir/pod-<pod>-<container>.log
// (the kubelet deletes a pod's logs with the pod).
func savePodLogs(ctx context.Context, c *cluster.Cluster, dir string) error {
	pods, err := c.Client.CoreV1().Pods(operandNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods in %s: %w", operandNamespace, err)
	}
	for _, p := range pods.Items {
		for _, ctr := range p.Spec.Containers {
			logs, err := c.PodLogs(ctx, p.Namespace, p.Name, ctr.Name)
			if err != nil {
				return err
			}
			f := filepath.Join(dir, "pod-"+p.Name+"-"+ctr.Name+".log")
			if err := os.WriteFile(f, []byte(logs), 0o644); err != nil {
				return fmt.Errorf("save the log of %s/%s: %w", p.Name, ctr.Name, err)
			}
		}
	}
	return nil
}

// waitOperandReady waits for the operand's DaemonSet pod on the node (label
// app.kubernetes.io/name=<operand>) to be Ready.
func waitOperandReady(ctx context.Context, c *cluster.Cluster, operand string, within time.Duration) (string, error) {
	return waitPodReady(ctx, c, names.OperandLabel+"="+operand, within)
}

// waitOperandGone waits until no pod of the operand is left.
func waitOperandGone(ctx context.Context, c *cluster.Cluster, operand string, within time.Duration) error {
	sel := names.OperandLabel + "=" + operand
	err := pollTrue(ctx, within, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(operandNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, fmt.Errorf("list pods %s: %w", sel, err)
		}
		return len(pods.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("pods %s gone: %w", sel, err)
	}
	return nil
}

// describePods is the state, events and last log lines of pods, for an error message.
func describePods(c *cluster.Cluster, pods []corev1.Pod) string {
	ctx, cancel := context.WithTimeout(context.Background(), callWithin)
	defer cancel()
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "\npod %s: phase %s", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "; %s ready=%v restarts=%d %s", cs.Name, cs.Ready, cs.RestartCount, stateOf(cs.State))
		}
		events, err := c.Client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err == nil {
			for _, e := range events.Items {
				fmt.Fprintf(&b, "\n  event %s %s: %s", e.Type, e.Reason, e.Message)
			}
		}
		for _, ctr := range p.Spec.Containers {
			logs, err := c.PodLogs(ctx, p.Namespace, p.Name, ctr.Name)
			if err == nil {
				fmt.Fprintf(&b, "\n  log of %s (last lines):\n%s", ctr.Name, indent(lastLines(logs, 15)))
			}
		}
	}
	return b.String()
}

func stateOf(s corev1.ContainerState) string {
	switch {
	case s.Waiting != nil:
		return "waiting " + s.Waiting.Reason + ": " + s.Waiting.Message
	case s.Terminated != nil:
		return fmt.Sprintf("terminated %s (exit %d): %s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	case s.Running != nil:
		return "running"
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitAllocatable waits until the Node's allocatable has n of a resource (what the real kubelet
// reports from the device plugins).
func waitAllocatable(ctx context.Context, c *cluster.Cluster, resource string, n int64, within time.Duration) error {
	var got string
	err := pollTrue(ctx, within, func() (bool, error) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get Node %s: %w", c.NodeName(), err)
		}
		q := node.Status.Allocatable[corev1.ResourceName(resource)]
		got = q.String()
		return q.Value() == n, nil
	})
	if err != nil {
		return fmt.Errorf("Node %s allocatable %s: %s, want %d: %w", c.NodeName(), resource, got, n, err)
	}
	return nil
}

// waitNodeLabel waits until the Node carries a label with a value.
func waitNodeLabel(ctx context.Context, c *cluster.Cluster, key, value string, within time.Duration) error {
	var got map[string]string
	err := pollTrue(ctx, within, func() (bool, error) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get Node %s: %w", c.NodeName(), err)
		}
		got = node.Labels
		return node.Labels[key] == value, nil
	})
	if err != nil {
		return fmt.Errorf("Node %s label %s=%s (labels %v): %w", c.NodeName(), key, value, got, err)
	}
	return nil
}

// waitNodeStateReady waits until the node's SandboxGPUNode has applied config and says Ready=True,
// as `kubectl get sgnode` shows it.
func waitNodeStateReady(ctx context.Context, c *cluster.Cluster, config string, within time.Duration) error {
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	var last string
	err = pollTrue(ctx, within, func() (bool, error) {
		u, err := dyn.Resource(nodeStates).Get(ctx, c.NodeName(), metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get SandboxGPUNode %s: %w", c.NodeName(), err)
		}
		applied, _, _ := unstructured.NestedString(u.Object, "status", "appliedConfig")
		state, _, _ := unstructured.NestedString(u.Object, "status", "state")
		msg, _, _ := unstructured.NestedString(u.Object, "status", "message")
		ready := condition(u, "Ready")
		last = fmt.Sprintf("state %q, applied %q, Ready=%s, %q", state, applied, ready, msg)
		return applied == config && ready == "True", nil
	})
	if err != nil {
		return fmt.Errorf("SandboxGPUNode %s ready with %s (last: %s): %w", c.NodeName(), config, last, err)
	}
	return nil
}

// condition is the status of a condition of an object ("" when it has none).
func condition(u *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// leftovers lists what of the product is still in the cluster: pods and DaemonSets of the operator
// and its operands (in any namespace), SandboxGPUPolicies and SandboxGPUNodes.
func leftovers(ctx context.Context, c *cluster.Cluster) ([]string, error) {
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	var out []string
	for _, sel := range []string{names.PartOfLabel + "=sandbox-gpu", names.OperandLabel + "=sandbox-gpu-operator"} {
		pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("list pods %s: %w", sel, err)
		}
		for _, p := range pods.Items {
			out = append(out, "pod "+p.Namespace+"/"+p.Name)
		}
		dss, err := c.Client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("list DaemonSets %s: %w", sel, err)
		}
		for _, d := range dss.Items {
			out = append(out, "DaemonSet "+d.Namespace+"/"+d.Name)
		}
	}
	for _, gvr := range []schema.GroupVersionResource{policies, nodeStates} {
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", gvr.Resource, err)
		}
		for _, u := range list.Items {
			out = append(out, gvr.Resource+" "+u.GetName())
		}
	}
	sort.Strings(out)
	return out, nil
}
