package mixednode

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/kata"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// TestKataAdvertisesOnlyVMGPUs: on an HGX H100 split 2 VM / 6 container
// GPUs by the VFIO manager, the Kata device plugin advertises exactly the
// two VM GPUs' IOMMU groups (24 and 25: GPUs 4 and 5, NUMA node 1), no
// container GPU and no NVSwitch (left on nvidia by a split).
func TestKataAdvertisesOnlyVMGPUs(t *testing.T) {
	_, h := hostsim.NewHost(t, "hgx-h100")
	d, err := vfio.NewDaemon(vfio.DaemonOptions{Host: h, Desired: vfio.Desired{VMGPUs: "2"}, Log: logr.Discard()})
	require.NoError(t, err)
	rep, err := d.Reconcile(context.Background())
	require.NoError(t, err)
	require.True(t, rep.Ready, rep.Reason)

	res, err := (&kata.Scanner{Host: h}).Scan(context.Background())
	require.NoError(t, err)
	require.Len(t, res, 1, "nvidia.com/pgpu only: no nvidia.com/nvswitch")
	assert.Equal(t, kata.DefaultResource, res[0].Name)
	var ids []string
	for _, dev := range res[0].Devices {
		ids = append(ids, dev.ID)
		assert.Equal(t, 1, dev.NUMA)
	}
	assert.ElementsMatch(t, []string{"24", "25"}, ids)
}
