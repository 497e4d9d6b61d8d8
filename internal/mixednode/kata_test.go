package mixednode

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/kata"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// TestKataAdvertisesOnlyVMGPUs: on an HGX H100 split 2 VM / 6 container
// GPUs by the VFIO manager, the Kata device plugin advertises exactly the
// two VM GPUs' IOMMU groups (24 and 25: GPUs 4 and 5, NUMA node 1), no
// container GPU and no NVSwitch (left on nvidia by a split); its preflight
// names the six container GPUs as such, not as host-bound problems.
func TestKataAdvertisesOnlyVMGPUs(t *testing.T) {
	_, h := hostsim.NewHost(t, "hgx-h100")
	d, err := vfio.NewDaemon(vfio.DaemonOptions{Host: h, Desired: vfio.Desired{VMGPUs: "2"}, Log: logr.Discard()})
	require.NoError(t, err)
	rep, err := d.Reconcile(context.Background())
	require.NoError(t, err)
	require.True(t, rep.Ready, rep.Reason)

	s := &kata.Scanner{Host: h, ContainerGPUs: func() map[host.Address]bool {
		out := map[host.Address]bool{}
		for _, a := range rep.Split.Container {
			out[a] = true
		}
		return out
	}}
	res, err := s.Scan(context.Background())
	require.NoError(t, err)
	require.Len(t, res, 1, "nvidia.com/pgpu only: no nvidia.com/nvswitch")
	assert.Equal(t, kata.DefaultResource, res[0].Name)
	var ids []string
	for _, dev := range res[0].Devices {
		ids = append(ids, dev.ID)
		assert.Equal(t, 1, dev.NUMA)
	}
	assert.ElementsMatch(t, []string{"24", "25"}, ids)
	pf := s.LastPreflight()
	assert.Len(t, pf.ContainerGPUs, 6)
	assert.Empty(t, pf.HostBoundGPUs, "the container GPUs are where the split wants them")
	assert.Empty(t, pf.Problems())

	// Without the split, the same GPUs are problems.
	plain := &kata.Scanner{Host: h}
	_, err = plain.Scan(context.Background())
	require.NoError(t, err)
	assert.Len(t, plain.LastPreflight().HostBoundGPUs, 6)
}
