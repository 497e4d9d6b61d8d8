package controllers

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

func vgpuManagerOn(s *v1alpha1.SandboxGPUPolicySpec) {
	on := true
	s.VGPUManager = v1alpha1.VGPUManagerSpec{Enabled: &on, Repository: "nvcr.io/example-org/vgpu", Image: "vgpu-manager", Version: "550.90.05"}
}

// A vm-vgpu node gets the vGPU host driver, the KubeVirt plugin and the
// validator at once, and the vGPU device manager once the host driver is
// ready there (it enables the VFs itself); the node is ready when all four
// are.
func TestVMVGPUNodeStartsTheDeviceManagerAfterTheHostDriver(t *testing.T) {
	c := startTest(t, newClock(), v1alpha1.WorkloadContainer, vgpuManagerOn)
	newNode(t, c, "n-vgpu-staged", map[string]string{names.WorkloadConfigLabel: v1alpha1.WorkloadVMVGPU})
	st := waitState(t, c, "n-vgpu-staged", "configuring", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateConfiguring })
	assert.ElementsMatch(t, []string{names.VGPUManager, names.KubeVirtDevicePlugin, names.Validator}, deployLabels(getNode(t, c, "n-vgpu-staged")))
	assert.Contains(t, st.Status.Message, names.VGPUDeviceManager, "the held-back operand is among those waited for")

	readyOperands(t, c, "n-vgpu-staged", names.VGPUManager)
	testutil.Eventually(t, wait, "the device manager labelled", func() bool {
		return len(deployLabels(getNode(t, c, "n-vgpu-staged"))) == 4
	})
	readyOperands(t, c, "n-vgpu-staged", names.VGPUDeviceManager, names.KubeVirtDevicePlugin, names.Validator)
	waitState(t, c, "n-vgpu-staged", "ready", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })
}

// Kata takes no vGPU: a vm-vgpu node in Kata mode is reported (failed,
// Degraded UnsupportedWorkloadConfig, one Warning event naming it, the
// policy's Degraded message) and gets no operand: a new node stays
// unconfigured, a passthrough node keeps running passthrough (nothing is
// drained for a switch that cannot happen). A valid label sets it up.
func TestKataModeReportsVMVGPUNodes(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	setPolicy(t, c, v1alpha1.SandboxWorkloads{Enabled: true, Mode: v1alpha1.ModeKata, DefaultWorkload: v1alpha1.WorkloadContainer}, vgpuManagerOn)
	startOperator(t, newClock())
	newNode(t, c, "n-kata-vgpu", map[string]string{names.WorkloadConfigLabel: v1alpha1.WorkloadVMVGPU})
	newNode(t, c, "n-kata-pt", map[string]string{names.WorkloadConfigLabel: v1alpha1.WorkloadVMPassthrough})
	ptOperands := []string{names.KataDevicePlugin, names.Validator, names.VFIOManager}
	readyOperands(t, c, "n-kata-pt", ptOperands...)
	waitState(t, c, "n-kata-pt", "ready", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })

	st := waitState(t, c, "n-kata-vgpu", "failed", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateFailed })
	assert.Empty(t, deployLabels(getNode(t, c, "n-kata-vgpu")), "no operand at all: not a passthrough node either")
	assert.Equal(t, v1alpha1.WorkloadVMVGPU, st.Status.WorkloadConfig)
	assert.Empty(t, st.Status.AppliedConfig, "unconfigured")
	for _, want := range []string{"n-kata-vgpu", "vm-vgpu", "Kata", "takes no vGPU", "left unconfigured"} {
		assert.Contains(t, st.Status.Message, want)
	}
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionProgressing} {
		cond := meta.FindStatusCondition(st.Status.Conditions, typ)
		require.NotNil(t, cond, typ)
		assert.Equal(t, metav1.ConditionFalse, cond.Status, typ)
		assert.Equal(t, ReasonUnsupportedConfig, cond.Reason, typ)
	}
	degraded := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionDegraded)
	require.NotNil(t, degraded)
	assert.Equal(t, metav1.ConditionTrue, degraded.Status)
	assert.Equal(t, ReasonUnsupportedConfig, degraded.Reason)
	waitEvent(t, c, "n-kata-vgpu", ReasonUnsupportedConfig, 1)
	ev := operatorEvents(t, c, "n-kata-vgpu")[ReasonUnsupportedConfig][0]
	assert.Equal(t, "Warning", ev.Type)
	assert.Contains(t, ev.Note, "Node n-kata-vgpu asks for vm-vgpu")

	var p v1alpha1.SandboxGPUPolicy
	testutil.Eventually(t, wait, "the policy says so", func() bool {
		_ = c.Get(context.Background(), types.NamespacedName{Name: PolicyName}, &p)
		d := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionDegraded)
		return d != nil && strings.Contains(d.Message, "Node n-kata-vgpu asks for vm-vgpu, which kata mode cannot serve")
	})

	// The passthrough node relabelled vm-vgpu keeps what it runs.
	setNodeLabel(t, c, "n-kata-pt", names.WorkloadConfigLabel, v1alpha1.WorkloadVMVGPU)
	st = waitState(t, c, "n-kata-pt", "failed", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateFailed })
	assert.Equal(t, v1alpha1.WorkloadVMPassthrough, st.Status.AppliedConfig)
	assert.Contains(t, st.Status.Message, "keeps running vm-passthrough")
	assert.ElementsMatch(t, ptOperands, deployLabels(getNode(t, c, "n-kata-pt")))

	// Requeues and unrelated changes report nothing again.
	for _, v := range []string{"1", "2"} {
		moreReconciles(t, 1, func() { setNodeLabel(t, c, "n-kata-vgpu", "unrelated.example/touch", v) })
	}
	assert.Len(t, operatorEvents(t, c, "n-kata-vgpu")[ReasonUnsupportedConfig], 1, "one event per problem")

	// Back to a config Kata serves: set up as usual.
	setNodeLabel(t, c, "n-kata-vgpu", names.WorkloadConfigLabel, v1alpha1.WorkloadVMPassthrough)
	st = waitState(t, c, "n-kata-vgpu", "configuring", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateConfiguring })
	assert.ElementsMatch(t, ptOperands, deployLabels(getNode(t, c, "n-kata-vgpu")))
	degraded = meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionDegraded)
	require.NotNil(t, degraded)
	assert.Equal(t, metav1.ConditionFalse, degraded.Status)
	setNodeLabel(t, c, "n-kata-pt", names.WorkloadConfigLabel, v1alpha1.WorkloadVMPassthrough)
	waitState(t, c, "n-kata-pt", "ready again", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateReady })
}
