//go:build cgo

package mixednode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// driverNVML is NVML as the nvidia driver of the simulated host shows it:
// the GPUs bound to nvidia, in PCI address order (NVML's index), with the
// minor and UUID the driver gives each. A GPU on vfio-pci is not the
// driver's, so NVML does not see it.
func driverNVML(t *testing.T, h *host.Host) (nvml.Interface, []host.Address) {
	t.Helper()
	snap, err := h.Scan()
	require.NoError(t, err)
	var devices []nvml.Device
	var seen []host.Address
	for _, f := range snap.Functions {
		if f.Vendor != host.VendorNVIDIA || f.Role != host.RoleGPU || f.PhysFn != "" || f.Driver != "nvidia" {
			continue
		}
		minor, ok := h.GPUMinor(f.Address)
		require.True(t, ok, "%s: the driver gives its minor", f.Address)
		uuid, ok := h.GPUUUID(f.Address)
		require.True(t, ok, "%s: the driver gives its UUID", f.Address)
		devices = append(devices, &mock.Device{
			GetUUIDFunc:        func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetMinorNumberFunc: func() (int, nvml.Return) { return minor, nvml.SUCCESS },
			GetMigModeFunc:     func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED },
		})
		seen = append(seen, f.Address)
	}
	return &mock.Interface{
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devices), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devices) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devices[i], nvml.SUCCESS
		},
	}, seen
}

// TestNRIDiscoverySeesOnlyContainerGPUs: on an HGX H100 the VFIO manager
// splits 3 GPUs for VMs (NUMA node 1) and 5 for containers; the NRI
// plugin's GPU discovery and CDI spec then hold exactly the five container
// GPUs (by index, UUID and /dev/nvidia<minor>), never a VM GPU, and "all"
// is those five. After the split shrinks to 1, the two GPUs returned to
// nvidia are container GPUs again.
func TestNRIDiscoverySeesOnlyContainerGPUs(t *testing.T) {
	k, h := hostsim.NewHost(t, "hgx-h100")
	split := func(decl string) *vfio.Split {
		d, err := vfio.NewDaemon(vfio.DaemonOptions{Host: h, Desired: vfio.Desired{VMGPUs: decl}, Log: logr.Discard()})
		require.NoError(t, err)
		rep, err := d.Reconcile(context.Background())
		require.NoError(t, err)
		require.True(t, rep.Ready, rep.Reason)
		return rep.Split
	}
	for _, c := range []struct {
		decl      string
		container int
	}{{"3", 5}, {"1", 7}} {
		s := split(c.decl)
		require.Len(t, s.Container, c.container, c.decl)
		lib, seen := driverNVML(t, h)
		assert.Equal(t, s.Container, seen, "%s: NVML sees the container GPUs", c.decl)

		inv, err := gpucdi.Discover(lib)
		require.NoError(t, err)
		require.Len(t, inv.GPUs, c.container)
		opts := k.Options()
		spec, err := gpucdi.Build(inv, gpucdi.Options{DevRoot: opts.DevRoot, ProcRoot: opts.ProcRoot, DriverRoot: driverRoot(t)})
		require.NoError(t, err)
		want := map[string]bool{}
		for i, a := range s.Container {
			minor, _ := h.GPUMinor(a)
			uuid, _ := h.GPUUUID(a)
			assert.Equal(t, inv.GPUs[i].UUID, uuid, "%s: GPU %d is %s", c.decl, i, a)
			node := "/dev/nvidia" + strconv.Itoa(minor)
			assert.Equal(t, []string{node}, gpuNodes(t, spec, strconv.Itoa(i)), "%s: GPU %d", c.decl, i)
			assert.Equal(t, []string{node}, gpuNodes(t, spec, uuid))
			want[node] = true
		}
		for _, a := range s.VM {
			minor, _ := h.GPUMinor(a)
			assert.False(t, want["/dev/nvidia"+strconv.Itoa(minor)], "%s: VM GPU %s is no container GPU", c.decl, a)
		}
		all := map[string]bool{}
		for _, n := range gpuNodes(t, spec, "all") {
			all[n] = true
		}
		assert.Equal(t, want, all, "%s: all is the container GPUs", c.decl)
	}
}

// driverRoot is a driver root with the one library a spec needs.
func driverRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	lib := filepath.Join(root, "usr", "lib64", "libcuda.so.550.54.15")
	require.NoError(t, os.MkdirAll(filepath.Dir(lib), 0o755))
	require.NoError(t, os.WriteFile(lib, []byte("ELF"), 0o644))
	return root
}

// gpuNodes lists the /dev/nvidia<N> nodes of the spec's device name.
func gpuNodes(t *testing.T, spec *cdispec.Spec, name string) []string {
	t.Helper()
	for _, d := range spec.Devices {
		if d.Name != name {
			continue
		}
		var out []string
		for _, n := range d.ContainerEdits.DeviceNodes {
			var minor int
			if _, err := fmt.Sscanf(n.Path, "/dev/nvidia%d", &minor); err == nil && n.Path == "/dev/nvidia"+strconv.Itoa(minor) {
				out = append(out, n.Path)
			}
		}
		return out
	}
	t.Fatalf("no CDI device %q", name)
	return nil
}
