package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/simnode"
)

// mixedNode: the vm-passthrough node annotated sandbox-gpu.io/vm-gpus=1 becomes a mixed node. The
// VFIO manager (following its Node over the API) keeps the A10 on NUMA node 1 on vfio-pci and
// returns the one on NUMA node 0 to nvidia, and reports the split on the Node; the kubelet's
// allocatable for the A10 model drops to one; the NRI plugin runs beside the VM operands for the
// container GPU; the node is Ready; a VM pod gets the VM GPU.
func mixedNode(ctx context.Context, t *testing.T, c *cluster.Cluster, n *simnode.Node) {
	setNodeAnnotation(ctx, t, c, names.VMGPUsAnnotation, ptr.To("1"))
	require.NoError(t, waitDrivers(ctx, n, operandWithin, map[string]string{gpuAddress: "nvidia", vmGPUAddress: "vfio-pci"}),
		"the split: the NUMA node 1 A10 for VMs, the NUMA node 0 A10 back to nvidia for containers")
	require.NoError(t, waitAllocatable(ctx, c, a10Resource, 1, stepWithin))
	_, err := waitOperandReady(ctx, c, names.NRIPlugin, operandWithin)
	require.NoError(t, err, "the NRI plugin on the mixed node")
	for _, op := range []string{names.VFIOManager, names.KubeVirtDevicePlugin, names.Validator} {
		_, err := waitOperandReady(ctx, c, op, stepWithin)
		require.NoError(t, err, op)
	}
	require.NoError(t, waitNodeStateReady(ctx, c, "vm-passthrough", stepWithin))
	var report struct {
		VM        []string `json:"vm"`
		Container []string `json:"container"`
	}
	require.NoError(t, pollTrue(ctx, stepWithin, func() (bool, error) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("get Node %s: %w", c.NodeName(), err)
		}
		raw, ok := node.Annotations[names.VMGPUsReportAnnotation]
		if !ok || json.Unmarshal([]byte(raw), &report) != nil {
			return false, nil
		}
		return len(report.VM) == 1 && len(report.Container) == 1, nil
	}), "the VFIO manager's split report on the Node")
	assert.Equal(t, []string{vmGPUAddress}, report.VM)
	assert.Equal(t, []string{gpuAddress}, report.Container)
	vmPod(ctx, t, c, n, "vms-mixed", vmGPUAddress)
}
