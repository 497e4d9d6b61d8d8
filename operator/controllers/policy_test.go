package controllers

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
	"github.com/sandbox-gpu/sandbox-gpu/operator/workload"
)

func daemonSets(t *testing.T, c client.Client) map[string]appsv1.DaemonSet {
	t.Helper()
	var list appsv1.DaemonSetList
	require.NoError(t, c.List(context.Background(), &list, client.InNamespace(operandNS)))
	out := map[string]appsv1.DaemonSet{}
	for _, ds := range list.Items {
		out[ds.Labels[names.OperandLabel]] = ds
	}
	return out
}

func TestOperandDaemonSetsFollowThePolicy(t *testing.T) {
	c := startTest(t, newClock(), "container")
	want := []string{names.KubeVirtDevicePlugin, names.KataDevicePlugin, names.NRIPlugin, names.NVIDIADevicePlugin, names.Validator, names.VFIOManager, names.VGPUDeviceManager, names.GPUDiscovery,
		names.ReleaseOperand(names.VFIOManager), names.ReleaseOperand(names.VGPUDeviceManager)}
	testutil.Eventually(t, wait, "operand DaemonSets", func() bool { return len(daemonSets(t, c)) == len(want) })
	ds := daemonSets(t, c)
	for _, o := range want {
		require.Contains(t, ds, o)
		sel := map[string]string{names.DeployLabel(o): "true"}
		if o == names.GPUDiscovery {
			sel = map[string]string{"kubernetes.io/os": "linux"}
		}
		if of, ok := operands.IsRelease(o); ok {
			sel = map[string]string{names.ReleaseLabel(of): "true"} // nodes leaving the config
		}
		assert.Equal(t, sel, ds[o].Spec.Template.Spec.NodeSelector)
	}
	assert.NotContains(t, ds, names.VGPUManager, "no vGPU host driver manager without its image")

	// Steady state: a reconcile that changes nothing writes nothing.
	rv := map[string]string{}
	for o, d := range ds {
		rv[o] = d.ResourceVersion
	}
	setPolicy(t, c, sandboxOn("container"), func(s *v1alpha1.SandboxGPUPolicySpec) { s.Kata.RuntimeClassName = "kata-other" })
	var p v1alpha1.SandboxGPUPolicy
	testutil.Eventually(t, wait, "policy reconciled", func() bool {
		_ = c.Get(context.Background(), types.NamespacedName{Name: PolicyName}, &p)
		return p.Status.ObservedGeneration == p.Generation
	})
	for o, d := range daemonSets(t, c) {
		assert.Equal(t, rv[o], d.ResourceVersion, "%s rewritten without a change", o)
	}

	// A policy change reaches the DaemonSet; disabling removes it.
	off := false
	setPolicy(t, c, sandboxOn("container"), func(s *v1alpha1.SandboxGPUPolicySpec) {
		s.VFIOManager.Image = "registry.example/vfio-manager:dev"
		s.Validator.Enabled = &off
		s.DevicePlugin.Enabled = &off // the GPU Operator's container stack runs it
	})
	testutil.Eventually(t, wait, "image override, validator and device plugin removal", func() bool {
		ds := daemonSets(t, c)
		_, validator := ds[names.Validator]
		_, dp := ds[names.NVIDIADevicePlugin]
		return !validator && !dp && ds[names.VFIOManager].Spec.Template.Spec.Containers[0].Image == "registry.example/vfio-manager:dev"
	})

	// Sandbox workloads off: no node operand but the discovery agent (and
	// the releases, for nodes that give back GPUs).
	setPolicy(t, c, v1alpha1.SandboxWorkloads{})
	only := []string{names.GPUDiscovery, names.ReleaseOperand(names.VFIOManager), names.ReleaseOperand(names.VGPUDeviceManager)}
	testutil.Eventually(t, wait, "only discovery and the releases", func() bool {
		ds := daemonSets(t, c)
		got := slices.Sorted(maps.Keys(ds))
		return slices.Equal(got, slices.Sorted(slices.Values(only)))
	})
}

func TestPolicyStatusCountsNodes(t *testing.T) {
	c := startTest(t, newClock(), "container")
	newNode(t, c, "s-a", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	newNode(t, c, "s-b", map[string]string{names.WorkloadConfigLabel: "vm-passthrough"})
	readyOperands(t, c, "s-a", workload.Operands("vm-passthrough", &v1alpha1.SandboxGPUPolicy{Spec: v1alpha1.SandboxGPUPolicySpec{SandboxWorkloads: sandboxOn("container")}})...)
	var p v1alpha1.SandboxGPUPolicy
	testutil.Eventually(t, wait, "counts", func() bool {
		_ = c.Get(context.Background(), types.NamespacedName{Name: PolicyName}, &p)
		return p.Status.Nodes.VMPassthrough >= 2 && p.Status.Nodes.Ready >= 1
	})
	ready := meta.FindStatusCondition(p.Status.Conditions, "Ready")
	require.NotNil(t, ready)
	assert.Equal(t, "False", string(ready.Status), "s-b is still configuring")
	assert.NotNil(t, meta.FindStatusCondition(p.Status.Conditions, "Degraded"))
}

func TestKataModeReportsMissingRuntimeClass(t *testing.T) {
	needEnv(t)
	c := testClient(t)
	setPolicy(t, c, v1alpha1.SandboxWorkloads{Enabled: true, Mode: v1alpha1.ModeKata, DefaultWorkload: "container"})
	startOperator(t, newClock())
	var p v1alpha1.SandboxGPUPolicy
	get := func() *metav1.Condition {
		_ = c.Get(context.Background(), types.NamespacedName{Name: PolicyName}, &p)
		return meta.FindStatusCondition(p.Status.Conditions, KataRuntimeClassCondition)
	}
	testutil.Eventually(t, wait, "missing RuntimeClass reported", func() bool { cond := get(); return cond != nil && cond.Status == "False" })
	assert.Contains(t, get().Message, "kata-qemu-nvidia-gpu")
	degraded := meta.FindStatusCondition(p.Status.Conditions, "Degraded")
	require.NotNil(t, degraded)
	assert.Equal(t, metav1.ConditionTrue, degraded.Status)
	assert.Contains(t, degraded.Message, "kata-qemu-nvidia-gpu")

	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata-qemu-nvidia-gpu"}, Handler: "sandboxed-gpu"}
	require.NoError(t, c.Create(context.Background(), rc))
	t.Cleanup(func() { _ = c.Delete(context.Background(), rc) })
	testutil.Eventually(t, wait, "RuntimeClass found", func() bool { cond := get(); return cond != nil && cond.Status == "True" })
	// The NRI plugin is told the RuntimeClass's handler (not its name, not a
	// kata* pattern) to leave Kata's pods alone.
	testutil.Eventually(t, wait, "the NRI plugin gets the handler", func() bool {
		ds, ok := daemonSets(t, c)[names.NRIPlugin]
		return ok && slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--kata-runtime-handler=sandboxed-gpu")
	})
}
