package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
)

// The shipped admission policy and RBAC let the vGPU device manager (a node
// daemon: its own sandbox-gpu-vgpu-device-manager account, its token bound to its node) do
// exactly what it does: set its own Node's nvidia.com/vgpu.config.state to
// pending, success or failed by merge patch, and create Events about it in
// namespace default. Nothing else under nvidia.com/, on no other Node.
func TestVGPUDeviceManagerMayWriteOnlyItsVGPUState(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	ctx := context.Background()
	applyOperatorManifests(t, c)
	newNode(t, c, "vgpu-vap-a", map[string]string{names.VGPUConfigLabel: "A10-4Q", names.WorkloadConfigLabel: "vm-vgpu"})
	newNode(t, c, "vgpu-vap-b", nil)
	daemon := daemonClient(t, names.VGPUDeviceManager, "vgpu-vap-a")
	// labels merge-patches the Node's labels as vgpu.Run does (a nil value
	// removes the label).
	labels := func(node string, l map[string]any) error {
		return mergePatchNode(t, daemon, node, map[string]any{"metadata": map[string]any{"labels": l}})
	}
	state := names.VGPUConfigStateLabel
	waitOwnNodeOnly(t, "the admission policy denies another node", func() error {
		return labels("vgpu-vap-b", map[string]any{state: "pending"})
	})
	const (
		ownNode   = "only their own Node"
		onlyState = "may change only sandbox-gpu.io/ labels other than sandbox-gpu.io/deploy.* and sandbox-gpu.io/release.*, and set nvidia.com/vgpu.config.state"
		values    = "may set nvidia.com/vgpu.config.state only to pending, success or failed"
		annotated = "may change only sandbox-gpu.io/ annotations"
	)
	for _, tc := range []struct {
		what string
		node string
		l    map[string]any
		ann  map[string]any
		deny string // "" allowed, else what the denial says
	}{
		{"pending before a change", "vgpu-vap-a", map[string]any{state: "pending"}, nil, ""},
		{"success after it", "vgpu-vap-a", map[string]any{state: "success"}, nil, ""},
		{"failed after a refusal", "vgpu-vap-a", map[string]any{state: "failed"}, nil, ""},
		{"with a sandbox-gpu.io label", "vgpu-vap-a", map[string]any{state: "success", "sandbox-gpu.io/probe": "x"}, nil, ""},
		{"another value", "vgpu-vap-a", map[string]any{state: "applied"}, nil, values},
		{"an empty value", "vgpu-vap-a", map[string]any{state: ""}, nil, values},
		{"removing it", "vgpu-vap-a", map[string]any{state: nil}, nil, onlyState},
		{"another Node's state", "vgpu-vap-b", map[string]any{state: "success"}, nil, ownNode},
		{"the config selection", "vgpu-vap-a", map[string]any{names.VGPUConfigLabel: "A10-8Q"}, nil, onlyState},
		{"removing the selection", "vgpu-vap-a", map[string]any{names.VGPUConfigLabel: nil}, nil, onlyState},
		{"the workload config", "vgpu-vap-a", map[string]any{names.WorkloadConfigLabel: "vm-passthrough"}, nil, onlyState},
		{"another nvidia.com label", "vgpu-vap-a", map[string]any{"nvidia.com/gpu.deploy.vgpu-device-manager": "true"}, nil, onlyState},
		{"a look-alike key", "vgpu-vap-a", map[string]any{"nvidia.com/vgpu.config.state.x": "success"}, nil, onlyState},
		{"the state as an annotation", "vgpu-vap-a", nil, map[string]any{state: "success"}, annotated},
		{"its release report", "vgpu-vap-a", nil, map[string]any{names.ReleaseReportAnnotation(names.VGPUDeviceManager): `{"done":true}`}, ""},
		{"a release label", "vgpu-vap-a", map[string]any{names.ReleaseLabel(names.VFIOManager): "true"}, nil, onlyState},
		{"a deploy label", "vgpu-vap-a", map[string]any{names.DeployLabel(names.VFIOManager): "true"}, nil, onlyState},
	} {
		patch := map[string]any{}
		if tc.l != nil {
			patch["labels"] = tc.l
		}
		if tc.ann != nil {
			patch["annotations"] = tc.ann
		}
		err := mergePatchNode(t, daemon, tc.node, map[string]any{"metadata": patch})
		if tc.deny == "" {
			assert.NoError(t, err, tc.what)
			continue
		}
		if assert.Error(t, err, tc.what) {
			assert.Contains(t, err.Error(), tc.deny, tc.what)
		}
	}
	n := getNode(t, c, "vgpu-vap-a")
	assert.Equal(t, "success", n.Labels[state], "the last allowed write")
	assert.Equal(t, "A10-4Q", n.Labels[names.VGPUConfigLabel], "the selection untouched")

	// Events about its Node, as vgpu.Run sends them: in default only.
	event := func(ns string) error {
		now := metav1.NewTime(time.Now())
		return daemon.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "vgpu-vap-a.", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "vgpu-vap-a", APIVersion: "v1"},
			Reason:         "VGPUConfigApplied", Message: "config applied", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "vgpu-device-manager", Host: "vgpu-vap-a"}, FirstTimestamp: now, LastTimestamp: now, Count: 1})
	}
	require.NoError(t, event(metav1.NamespaceDefault))
	err := event(metav1.NamespaceSystem)
	require.Error(t, err, "events elsewhere")
	assert.Contains(t, err.Error(), "forbidden")
}
