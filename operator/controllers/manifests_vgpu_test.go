package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// The shipped admission policy and RBAC let the vGPU device manager (a node
// daemon: its own sandbox-gpu-vgpu-device-manager account, its token bound to its node) do
// exactly what it does: set its own Node's nvidia.com/vgpu.config.state to
// pending, success or failed by merge patch, and create Events about it in
// namespace default about that Node only. Nothing else under nvidia.com/,
// no other daemon's key (its release's report included), on no other Node.
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
		onlyState = "may change only their own labels: sandbox-gpu-vgpu-device-manager may change only nvidia.com/vgpu.config.state, not "
		values    = "may set nvidia.com/vgpu.config.state only to pending, success or failed, and never remove it"
		annotated = "may change only their own annotations: sandbox-gpu-vgpu-device-manager may change none, not "
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
		{"with a sandbox-gpu.io label", "vgpu-vap-a", map[string]any{state: "success", "sandbox-gpu.io/probe": "x"}, nil, onlyState + "sandbox-gpu.io/probe"},
		{"the discovery agent's label", "vgpu-vap-a", map[string]any{names.GPUPresentLabel: "true"}, nil, onlyState + names.GPUPresentLabel},
		{"another value", "vgpu-vap-a", map[string]any{state: "applied"}, nil, values},
		{"an empty value", "vgpu-vap-a", map[string]any{state: ""}, nil, values},
		{"removing it", "vgpu-vap-a", map[string]any{state: nil}, nil, values},
		{"another Node's state", "vgpu-vap-b", map[string]any{state: "success"}, nil, ownNode},
		{"the config selection", "vgpu-vap-a", map[string]any{names.VGPUConfigLabel: "A10-8Q"}, nil, onlyState},
		{"removing the selection", "vgpu-vap-a", map[string]any{names.VGPUConfigLabel: nil}, nil, onlyState},
		{"the workload config", "vgpu-vap-a", map[string]any{names.WorkloadConfigLabel: "vm-passthrough"}, nil, onlyState},
		{"another nvidia.com label", "vgpu-vap-a", map[string]any{"nvidia.com/gpu.deploy.vgpu-device-manager": "true"}, nil, onlyState},
		{"a look-alike key", "vgpu-vap-a", map[string]any{"nvidia.com/vgpu.config.state.x": "success"}, nil, onlyState},
		{"the state as an annotation", "vgpu-vap-a", nil, map[string]any{state: "success"}, annotated},
		{"its release's report", "vgpu-vap-a", nil, map[string]any{names.ReleaseReportAnnotation(names.VGPUDeviceManager): `{"done":true}`}, annotated + names.ReleaseReportAnnotation(names.VGPUDeviceManager)},
		{"the validator's annotation", "vgpu-vap-a", nil, map[string]any{names.PermittedAnnotation: "{}"}, annotated + names.PermittedAnnotation},
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
	assert.Equal(t, "failed", n.Labels[state], "the last allowed write")
	assert.Equal(t, "A10-4Q", n.Labels[names.VGPUConfigLabel], "the selection untouched")

	// Events about its Node, as vgpu.Run sends them: in default only, and
	// only about its own Node (the events admission policy), for the vGPU
	// device manager and its release alike.
	event := func(daemon client.Client, ns string, about corev1.ObjectReference) error {
		now := metav1.NewTime(time.Now())
		return daemon.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "vgpu-vap-a.", Namespace: ns},
			InvolvedObject: about,
			Reason:         "VGPUConfigApplied", Message: "config applied", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "vgpu-device-manager", Host: "vgpu-vap-a"}, FirstTimestamp: now, LastTimestamp: now, Count: 1})
	}
	own := corev1.ObjectReference{Kind: "Node", Name: "vgpu-vap-a", APIVersion: "v1"}
	release := daemonClient(t, names.ReleaseOperand(names.VGPUDeviceManager), "vgpu-vap-a")
	const aboutOwn = "sandbox-gpu node daemons may create Events only about their own Node"
	testutil.Eventually(t, wait, "the events admission policy is in force", func() bool {
		err := event(daemon, metav1.NamespaceDefault, corev1.ObjectReference{Kind: "Node", Name: "vgpu-vap-b", APIVersion: "v1"})
		return err != nil && strings.Contains(err.Error(), aboutOwn)
	})
	require.NoError(t, event(daemon, metav1.NamespaceDefault, own))
	require.NoError(t, event(release, metav1.NamespaceDefault, own), "its release")
	err := event(daemon, metav1.NamespaceSystem, own)
	require.Error(t, err, "events elsewhere")
	assert.Contains(t, err.Error(), "forbidden")
	for what, tc := range map[string]struct {
		c     client.Client
		about corev1.ObjectReference
	}{
		"another Node":               {daemon, corev1.ObjectReference{Kind: "Node", Name: "vgpu-vap-b", APIVersion: "v1"}},
		"a pod":                      {daemon, corev1.ObjectReference{Kind: "Pod", Name: "vgpu-vap-a", Namespace: "default", APIVersion: "v1"}},
		"its release, another Node":  {release, corev1.ObjectReference{Kind: "Node", Name: "vgpu-vap-b", APIVersion: "v1"}},
		"a namespaced look-alike":    {daemon, corev1.ObjectReference{Kind: "Node", Name: "vgpu-vap-a", Namespace: "default", APIVersion: "v1"}},
		"a token for another node's": {daemonClient(t, names.VGPUDeviceManager, "vgpu-vap-b"), own},
	} {
		err := event(tc.c, metav1.NamespaceDefault, tc.about)
		if assert.Error(t, err, what) {
			assert.Contains(t, err.Error(), aboutOwn, what)
		}
	}
}
