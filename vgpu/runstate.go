package vgpu

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// Reasons of the events Run emits on its Node (namespace default, source
// vgpu-device-manager).
const (
	EventConfigInvalid = "VGPUConfigInvalid" // Warning: the config file or selection is wrong
	EventRefused       = "VGPUConfigRefused" // Warning: a GPU refused ("in use: ...") or failed
	EventFailed        = "VGPUConfigFailed"  // Warning: the host could not be read
	EventApplied       = "VGPUConfigApplied" // Normal: vGPUs were changed as the config says
	// EventReleaseRefused (Warning): a release left a GPU alone (a vGPU in
	// use) or failed on it.
	EventReleaseRefused = "VGPUReleaseRefused"
	// EventReleased (Normal): a release removed the node's vGPUs and VFs.
	EventReleased = "VGPUReleased"
)

// eventComponent is the events' source.
const eventComponent = "vgpu-device-manager"

// setState writes the nvidia.com/vgpu.config.state label when it differs
// from what the Node has (or, while the cache lags our last write, from
// what we wrote).
func (r *runner) setState(ctx context.Context, node *corev1.Node, state string) {
	current := node.Labels[names.VGPUConfigStateLabel]
	if r.stale[node.ResourceVersion] {
		current = r.sent
	} else {
		clear(r.stale)
	}
	if current == state {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{names.VGPUConfigStateLabel: state}}})
	got, err := r.o.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		r.o.Log.Error(err, "Cannot set the node's vGPU config state", "node", node.Name, "label", names.VGPUConfigStateLabel, "state", state)
		return
	}
	// Until the cache shows our write, it shows the Node from before it,
	// or from before an earlier write of ours.
	r.stale[node.ResourceVersion] = true
	if r.lastRV != "" {
		r.stale[r.lastRV] = true
	}
	delete(r.stale, got.ResourceVersion)
	r.sent, r.lastRV = state, got.ResourceVersion
	r.o.Log.Info("vGPU config state", "node", node.Name, "state", state)
}

// event emits an event on the Node, unless the same one was the last.
func (r *runner) event(ctx context.Context, node *corev1.Node, typ, reason, msg string) {
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	if r.lastEvent == reason+"\x00"+msg {
		return
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: node.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject:      corev1.ObjectReference{Kind: "Node", Name: node.Name, UID: node.UID, APIVersion: "v1"},
		Reason:              reason,
		Message:             msg,
		Type:                typ,
		Source:              corev1.EventSource{Component: eventComponent, Host: node.Name},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: names.Domain + "/" + eventComponent,
		ReportingInstance:   node.Name,
	}
	if _, err := r.o.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		r.o.Log.Error(err, "Cannot emit an event on the node", "node", node.Name, "reason", reason)
		return
	}
	r.lastEvent = reason + "\x00" + msg
	if typ == corev1.EventTypeWarning {
		r.o.Log.Info("vGPU config problem", "node", node.Name, "reason", reason, "message", msg)
	}
}
