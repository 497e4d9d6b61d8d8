package kubevirt

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// splitHost applies a mixed node's split with the VFIO manager's daemon.
func splitHost(t *testing.T, h *host.Host, decl string) *vfio.ReadyReport {
	t.Helper()
	d, err := vfio.NewDaemon(vfio.DaemonOptions{Host: h, Desired: vfio.Desired{VMGPUs: decl}, Log: logr.Discard()})
	require.NoError(t, err)
	rep, err := d.Reconcile(context.Background())
	require.NoError(t, err)
	require.True(t, rep.Ready, rep.Reason)
	return rep
}

func only(t *testing.T, res map[string]deviceplugin.Resource) deviceplugin.Resource {
	t.Helper()
	require.Len(t, res, 1)
	for _, r := range res {
		return r
	}
	return deviceplugin.Resource{}
}

func deviceIDs(r deviceplugin.Resource) []string {
	return testutil.Map(r.Devices, func(d deviceplugin.Device) string { return d.ID })
}

// TestMixedNodeAdvertisesOnlyVMGPUs: on an HGX H100 split 3 for VMs and 5
// for containers, the plugin advertises exactly the three GPUs on vfio
// (NUMA node 1), never a container GPU or an NVSwitch left on nvidia; when
// the split shrinks to 1, the two GPUs returned fail their health check
// and the next scan advertises one.
func TestMixedNodeAdvertisesOnlyVMGPUs(t *testing.T) {
	k, h := hostsim.NewHost(t, "hgx-h100")
	rep := splitHost(t, h, "3")
	require.Equal(t, []host.Address{"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0"}, rep.Split.VM)
	s, res := scan(t, h, "")
	require.Len(t, res, 1, "one passthrough resource, nothing for the container GPUs or the NVSwitches")
	r := only(t, res)
	assert.Equal(t, []string{"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0"}, deviceIDs(r))
	for _, d := range r.Devices {
		assert.Equal(t, 1, d.NUMA)
		require.NoError(t, d.Check())
	}
	require.Len(t, s.Permitted().PciHostDevices, 1)
	assert.Equal(t, "10DE:2330", s.Permitted().PciHostDevices[0].PCIVendorSelector)

	splitHost(t, h, "1")
	assert.Equal(t, "nvidia", k.DriverOf("0000:ab:00.0"))
	assert.Error(t, r.Devices[1].Check(), "a GPU back on nvidia is unhealthy to the kubelet")
	assert.Error(t, r.Devices[2].Check())
	_, res = scan(t, h, "")
	require.Len(t, res, 1)
	assert.Equal(t, []string{"0000:9a:00.0"}, deviceIDs(only(t, res)))
}
