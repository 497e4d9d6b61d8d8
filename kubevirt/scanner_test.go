package kubevirt

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
	"github.com/sandbox-gpu/sandbox-gpu/vfio/vfiotest"
)

func move(t testing.TB, h *host.Host, sel vfio.Selection, target vfio.Target) {
	t.Helper()
	vfiotest.Move(t, h, sel, target)
}

var allNVIDIA = vfiotest.AllNVIDIA

func scan(t testing.TB, h *host.Host, pciIDs string) (*Scanner, map[string]deviceplugin.Resource) {
	t.Helper()
	n, err := NewNamer(pciIDs, "")
	require.NoError(t, err)
	s := &Scanner{Host: h, Namer: n}
	res, err := s.Scan(context.Background())
	require.NoError(t, err)
	out := map[string]deviceplugin.Resource{}
	for _, r := range res {
		out[r.Name] = r
	}
	return s, out
}

func hostPaths(d deviceplugin.Device) []string {
	return testutil.Map(d.Specs, func(s *pluginapi.DeviceSpec) string { return s.HostPath })
}

func TestPassthroughGPUs(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	_, res := scan(t, h, "")
	assert.Empty(t, res, "a GPU on the nvidia driver is not advertised")

	move(t, h, allNVIDIA, vfio.ToVFIO)
	s, res := scan(t, h, "")
	require.Len(t, res, 1)
	r := res["nvidia.com/GA102GL_A10"]
	require.Len(t, r.Devices, 1)
	d := r.Devices[0]
	assert.Equal(t, "0000:3b:00.0", d.ID)
	assert.Equal(t, 0, d.NUMA)
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/12"}, hostPaths(d))
	resp := r.Allocate(r.Devices)
	assert.Equal(t, map[string]string{"PCI_RESOURCE_NVIDIA_COM_GA102GL_A10": "0000:3b:00.0"}, resp.Envs)
	require.NoError(t, d.Check())

	p := s.Permitted()
	require.Len(t, p.PciHostDevices, 1)
	assert.Equal(t, "10DE:2236", p.PciHostDevices[0].PCIVendorSelector)
	assert.Equal(t, "nvidia.com/GA102GL_A10", p.PciHostDevices[0].ResourceName)
	assert.True(t, p.PciHostDevices[0].ExternalResourceProvider)

	move(t, h, vfio.Selection{Devices: []host.Address{"0000:3b:00.0"}, Vendor: host.VendorNVIDIA}, vfio.ToHost)
	require.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))
	err := d.Check()
	require.Error(t, err, "a device rebound to the host fails its Allocate check")
	assert.Contains(t, err.Error(), "0000:3b:00.0")
}

func TestHGXOneResourceEightGPUsWithNUMA(t *testing.T) {
	_, h := hostsim.NewHost(t, "hgx-h100")
	move(t, h, allNVIDIA, vfio.ToVFIO)
	_, res := scan(t, h, "")
	require.Len(t, res, 1, "NVSwitches are not KubeVirt GPU resources")
	r := res["nvidia.com/GH100_H100_SXM5_80GB"]
	require.Len(t, r.Devices, 8)
	numa := map[int]int{}
	for _, d := range r.Devices {
		numa[d.NUMA]++
	}
	assert.Equal(t, map[int]int{0: 4, 1: 4}, numa)
	resp := r.Allocate(r.Devices[:2])
	assert.Equal(t, "0000:18:00.0,0000:2a:00.0", resp.Envs["PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB"])
	again := r.Allocate(r.Devices[2:3])
	assert.Equal(t, "0000:3a:00.0", again.Envs["PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB"], "a fresh response per container")
}

func TestCompanionFunctionsGoWithTheGPU(t *testing.T) {
	_, h := hostsim.NewHost(t, "workstation")
	move(t, h, allNVIDIA, vfio.ToVFIO)
	_, res := scan(t, h, writePCIIDs(t, oldPCIIDs))
	require.Len(t, res, 1)
	r := res["nvidia.com/GA102GL_RTX_A6000"]
	require.Len(t, r.Devices, 1, "audio, USB and UCSI are not resources")
	assert.Equal(t, "0000:01:00.0", r.Devices[0].ID)
}

func TestIOMMUFDSpecs(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	move(t, h, allNVIDIA, vfio.ToVFIO)
	require.NoError(t, k.EnableIOMMUFD())
	_, res := scan(t, h, "")
	d := res["nvidia.com/GA102GL_A10"].Devices[0]
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/12", "/dev/iommu", "/dev/vfio/devices/vfio0"}, hostPaths(d))
}

func TestMediatedVGPUs(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	const u1, u2 = "0c0ffee0-0000-4000-8000-000000000001", "0c0ffee0-0000-4000-8000-000000000002"
	require.NoError(t, k.AddMdev("0000:3b:00.0", u1, "nvidia-558", "NVIDIA A10-4Q", 100))
	require.NoError(t, k.AddMdev("0000:3b:00.0", u2, "nvidia-558", "NVIDIA A10-4Q", 101))
	s, res := scan(t, h, "")
	r, ok := res["nvidia.com/NVIDIA_A10-4Q"]
	require.True(t, ok, "%v", res)
	require.Len(t, r.Devices, 2)
	assert.Equal(t, u1, r.Devices[0].ID)
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/100"}, hostPaths(r.Devices[0]))
	resp := r.Allocate(r.Devices)
	assert.Equal(t, map[string]string{"MDEV_PCI_RESOURCE_NVIDIA_COM_NVIDIA_A10-4Q": u1 + "," + u2}, resp.Envs)
	p := s.Permitted()
	require.Len(t, p.MediatedDevices, 1)
	assert.Equal(t, "NVIDIA A10-4Q", p.MediatedDevices[0].MDEVNameSelector)
	assert.Equal(t, "nvidia.com/NVIDIA_A10-4Q", p.MediatedDevices[0].ResourceName)

	require.NoError(t, r.Devices[1].Check())
	require.NoError(t, k.RemoveMdev(u2, 101))
	assert.Error(t, r.Devices[1].Check(), "a removed mdev fails its check")
	_, res = scan(t, h, "")
	assert.Len(t, res["nvidia.com/NVIDIA_A10-4Q"].Devices, 1)
}

// Vendor-specific VFIO vGPU (Ada/Hopper): VFs stay on nvidia; a VF with a
// vGPU type is a PCI resource named after the type.
func TestSRIOVVendorVGPUs(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	pf := hostsim.Func{Address: "0000:41:00.0", Vendor: 0x10de, Device: 0x26b9, SubVendor: 0x10de, SubDevice: 0x1851,
		Class: 0x030200, Driver: "nvidia", Group: 80, NUMA: 1, NvidiaMinor: 1, TotalVFs: 2, NumVFs: 2}
	require.NoError(t, k.AddFunction(pf))
	for i, a := range []string{"0000:41:00.4", "0000:41:00.5"} {
		vf := pf
		vf.Address, vf.Group, vf.PhysFn, vf.NvidiaMinor, vf.TotalVFs, vf.NumVFs = a, 81+i, "0000:41:00.0", -1, 0, 0
		require.NoError(t, k.AddFunction(vf))
	}
	require.NoError(t, k.SetVirtFns("0000:41:00.0", "0000:41:00.4", "0000:41:00.5"))
	require.NoError(t, k.SetVGPU("0000:41:00.4", 1155, map[int]string{}))
	require.NoError(t, k.SetVGPU("0000:41:00.5", 0, map[int]string{1155: "NVIDIA L40S-24Q", 1156: "NVIDIA L40S-48Q"}))

	s, res := scan(t, h, "")
	r, ok := res["nvidia.com/NVIDIA_L40S-24Q"]
	require.True(t, ok, "%v", res)
	require.Len(t, r.Devices, 1, "only the VF with a type is advertised; the PF never is")
	assert.Equal(t, "0000:41:00.4", r.Devices[0].ID)
	assert.Equal(t, 1, r.Devices[0].NUMA)
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/81"}, hostPaths(r.Devices[0]))
	assert.Equal(t, map[string]string{"PCI_RESOURCE_NVIDIA_COM_NVIDIA_L40S-24Q": "0000:41:00.4"}, r.Allocate(r.Devices).Envs)
	assert.Equal(t, "10DE:26B9", s.Permitted().PciHostDevices[0].PCIVendorSelector)

	require.NoError(t, r.Devices[0].Check())
	require.NoError(t, k.SetVGPU("0000:41:00.4", 0, map[int]string{1155: "NVIDIA L40S-24Q"}))
	assert.Error(t, r.Devices[0].Check(), "a VF whose vGPU was destroyed fails its check")
}

func TestWritePermittedOnlyOnChange(t *testing.T) {
	_, h := hostsim.NewHost(t, "a10")
	move(t, h, allNVIDIA, vfio.ToVFIO)
	s, _ := scan(t, h, "")
	path := filepath.Join(t.TempDir(), "run", "permitted.json")
	require.NoError(t, wire.WritePermitted(path, s.Permitted()))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"pciVendorSelector": "10DE:2236"`)
	assert.Contains(t, string(b), `"externalResourceProvider": true`)
	before, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, wire.WritePermitted(path, s.Permitted()))
	after, err := os.Stat(path)
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "unchanged content is not rewritten")
}

func TestEnvName(t *testing.T) {
	assert.Equal(t, "PCI_RESOURCE_NVIDIA_COM_GA102GL_A10", EnvName("PCI_RESOURCE", "nvidia.com/GA102GL_A10"))
	assert.Equal(t, "nvidia.com/NVIDIA_A10-4Q", TypeResource("NVIDIA A10-4Q"))
}

func writePCIIDs(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pci.ids")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

const oldPCIIDs = "10de  NVIDIA Corporation\n\t2230  GA102GL [RTX A6000]\n"
