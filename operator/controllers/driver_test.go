package controllers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/agenttest"
	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
)

// TestDriverChangeRefused: without the policy's vGPU host driver
// (vgpuManager) the operator changes no NVIDIA driver. A vm-vgpu node on a
// vGPU host driver installed on the host asked for container, and a
// container node on the data-centre driver asked for vm-vgpu, are refused
// before anything is drained or released (the real node daemons and the
// GPU discovery agent on simulated hosts): failed, Degraded
// DriverChangeRefused with a message that says what to do, a Warning event;
// the node keeps its config, its operands and its vGPUs; labelled back, it
// is ready again.
func TestDriverChangeRefused(t *testing.T) {
	c := startTest(t, newClock(), "container", sandboxOnAll)
	cases := []struct{ name, fixture, from, to, vgpuConfig, says string }{
		{"drv-vgpu", "l40s-vgpu", v1alpha1.WorkloadVMVGPU, v1alpha1.WorkloadContainer, "L40S-24Q",
			"vGPU host driver (" + names.GPUDriverLabel + "=vgpu-host), installed on the host, which serves no CUDA container"},
		{"drv-ctr", "a10", v1alpha1.WorkloadContainer, v1alpha1.WorkloadVMVGPU, "",
			"data-centre driver (" + names.GPUDriverLabel + "=datacenter), which offers no vGPU"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			labels := map[string]string{names.WorkloadConfigLabel: tc.from}
			if tc.vgpuConfig != "" {
				labels[names.VGPUConfigLabel] = tc.vgpuConfig
			}
			n := startSimNode(t, c, tc.name, tc.fixture, labels, func(o *agenttest.Options) { o.Discovery = true })
			n.waitReady(t, tc.from)
			testutil.Eventually(t, agentWait, tc.name+": the discovery agent reports the driver", func() bool {
				return getNode(t, c, tc.name).Labels[names.GPUDriverLabel] != ""
			})
			ops := deployLabels(getNode(t, c, tc.name))
			vgpus, _ := n.vgpuCounts(t)
			mark := n.startCount()

			setNodeLabel(t, c, tc.name, names.WorkloadConfigLabel, tc.to)
			st := n.waitFor(t, "refused", func(s *v1alpha1.SandboxGPUNode) bool { return s.Status.State == v1alpha1.StateFailed })
			d := meta.FindStatusCondition(st.Status.Conditions, v1alpha1.ConditionDegraded)
			require.NotNil(t, d)
			assert.Equal(t, ReasonDriverChangeRefused, d.Reason)
			assert.Contains(t, st.Status.Message, tc.says)
			assert.Contains(t, st.Status.Message, "spec.vgpuManager", "the message says what to do")
			assert.Contains(t, st.Status.Message, "It keeps running "+tc.from+" with its operands.")
			assert.Equal(t, tc.from, st.Status.AppliedConfig)
			waitEvent(t, c, tc.name, ReasonDriverChangeRefused, 1)
			assert.ElementsMatch(t, ops, deployLabels(getNode(t, c, tc.name)), "nothing drained, released or switched")
			assert.Empty(t, releaseLabels(getNode(t, c, tc.name)))
			assert.Empty(t, operandsOf(n.startsSince(mark)), "no operand started")
			after, _ := n.vgpuCounts(t)
			assert.Equal(t, vgpus, after, "the vGPUs stay")

			setNodeLabel(t, c, tc.name, names.WorkloadConfigLabel, tc.from)
			n.waitReady(t, tc.from)
			assert.Empty(t, n.a.Kernel().Violations())
		})
	}
}
