package kata

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/gpuname"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

var hgxGPUs = []host.Address{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
	"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}

var hgxSwitches = []host.Address{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"}

func TestScanA10OnePGPUPerGroup(t *testing.T) {
	_, h := onVFIO(t, "a10")
	res := scanAll(t, &Scanner{Host: h})
	require.Equal(t, []string{DefaultResource}, names(res))
	r := res[0]
	require.NotNil(t, r.Allocate, "the resource answers Allocate with CDI names")
	require.Len(t, r.Devices, 1)
	d := r.Devices[0]
	assert.Equal(t, "12", d.ID, "device ID is the IOMMU group")
	assert.Equal(t, 0, d.NUMA)
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/12"}, hostPaths(d))
	for _, s := range d.Specs {
		assert.Equal(t, s.HostPath, s.ContainerPath)
		assert.Equal(t, "mrw", s.Permissions)
	}
	assert.Equal(t, []string{"nvidia.com/pgpu=12"}, d.Values, "the CDI device name is kind=ID")
	require.NotNil(t, d.Check)
}

func TestScanHGXGPUsAndNVSwitches(t *testing.T) {
	_, h := onVFIO(t, "hgx-h100")
	res := scanAll(t, &Scanner{Host: h})
	require.Equal(t, []string{DefaultNVSwitchResource, DefaultResource}, names(res), "sorted; the ConnectX NICs are not advertised")
	m := byName(res)

	gpus := m[DefaultResource]
	require.Len(t, gpus.Devices, 8)
	for i, d := range gpus.Devices {
		id := strconv.Itoa(20 + i)
		assert.Equal(t, id, d.ID)
		assert.Equal(t, i/4, d.NUMA, "GPU %s NUMA", id)
		assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/" + id}, hostPaths(d))
		assert.Equal(t, []string{DefaultResource + "=" + id}, d.Values)
	}

	sw := m[DefaultNVSwitchResource]
	assert.Equal(t, []string{"40", "41", "42", "43"}, ids(sw))
	for _, d := range sw.Devices {
		assert.Equal(t, []string{DefaultNVSwitchResource + "=" + d.ID}, d.Values, "NVSwitch CDI names use their own kind")
		assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/" + d.ID}, hostPaths(d))
	}
	require.NotNil(t, sw.Allocate)
}

func TestScanWorkstationCompanionsGoWithTheGPU(t *testing.T) {
	k, h := onVFIO(t, "workstation")
	for _, a := range []host.Address{"0000:01:00.0", "0000:01:00.1", "0000:01:00.2", "0000:01:00.3"} {
		require.Equal(t, "vfio-pci", k.DriverOf(a), "the whole group is on vfio")
	}
	res := scanAll(t, &Scanner{Host: h})
	require.Equal(t, []string{DefaultResource}, names(res), "audio, USB and UCSI are no resources of their own")
	assert.Equal(t, []string{"1"}, ids(res[0]), "one device for group 1")
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/1"}, hostPaths(res[0].Devices[0]))
}

func TestScanGH200VariantDriver(t *testing.T) {
	k, h := onVFIO(t, "gh200")
	require.Equal(t, "nvgrace_gpu_vfio_pci", k.DriverOf("0009:01:00.0"))
	res := scanAll(t, &Scanner{Host: h})
	require.Equal(t, []string{DefaultResource}, names(res))
	assert.Equal(t, []string{"5"}, ids(res[0]), "a vfio variant driver counts as vfio")
}

func TestScanSkipsFunctionsOnHostDrivers(t *testing.T) {
	t.Run("nothing bound", func(t *testing.T) {
		for _, fx := range []string{"a10", "hgx-h100", "workstation"} {
			_, h := hostsim.NewHost(t, fx)
			assert.Empty(t, scanAll(t, &Scanner{Host: h}), fx)
		}
	})
	t.Run("one of two GPUs bound", func(t *testing.T) {
		// 0000:3b:00.0 is held open by a process, so only 0000:af:00.0 moves.
		k, h := hostsim.NewHost(t, "gpu-in-use")
		move(t, h, vfio.Selection{Devices: []host.Address{"0000:af:00.0"}, Vendor: host.VendorNVIDIA}, vfio.ToVFIO)
		require.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))
		s := &Scanner{Host: h}
		res := scanAll(t, s)
		require.Equal(t, []string{DefaultResource}, names(res))
		assert.Equal(t, []string{"60"}, ids(res[0]))
		assert.Equal(t, 1, res[0].Devices[0].NUMA)
		assert.Equal(t, []string{"0000:3b:00.0"}, s.LastPreflight().HostBoundGPUs)
	})
	t.Run("one HGX GPU and one NVSwitch returned", func(t *testing.T) {
		_, h := onVFIO(t, "hgx-h100")
		toHost(t, h, hgxGPUs[2], hgxSwitches[1])
		m := byName(scanAll(t, &Scanner{Host: h}))
		assert.Equal(t, []string{"20", "21", "23", "24", "25", "26", "27"}, ids(m[DefaultResource]))
		assert.Equal(t, []string{"40", "42", "43"}, ids(m[DefaultNVSwitchResource]))
	})
}

func TestScanIOMMUFDDeviceIDs(t *testing.T) {
	k, h := onVFIO(t, "a10")
	require.NoError(t, k.EnableIOMMUFD())
	res := scanAll(t, &Scanner{Host: h})
	require.Equal(t, []string{DefaultResource}, names(res))
	require.Len(t, res[0].Devices, 1)
	d := res[0].Devices[0]
	assert.Equal(t, "vfio0", d.ID, "with iommufd the device ID is the vfio cdev")
	assert.Equal(t, []string{"nvidia.com/pgpu=vfio0"}, d.Values)
	assert.Equal(t, []string{"/dev/vfio/vfio", "/dev/vfio/12", "/dev/iommu", "/dev/vfio/devices/vfio0"}, hostPaths(d))

	k, h = onVFIO(t, "hgx-h100")
	require.NoError(t, k.EnableIOMMUFD())
	m := byName(scanAll(t, &Scanner{Host: h}))
	seen := map[string]bool{}
	for _, name := range []string{DefaultResource, DefaultNVSwitchResource} {
		for _, d := range m[name].Devices {
			assert.True(t, strings.HasPrefix(d.ID, "vfio"), "%s: %s", name, d.ID)
			assert.False(t, seen[d.ID], "IDs are unique across resources: %s", d.ID)
			seen[d.ID] = true
			assert.Contains(t, hostPaths(d), "/dev/iommu")
			assert.Contains(t, hostPaths(d), "/dev/vfio/devices/"+d.ID)
		}
	}
	assert.Len(t, m[DefaultResource].Devices, 8)
	assert.Len(t, m[DefaultNVSwitchResource].Devices, 4)
}

func TestScanCustomResourceNames(t *testing.T) {
	_, h := onVFIO(t, "hgx-h100")
	res := scanAll(t, &Scanner{Host: h, Resource: "example.com/gpu", NVSwitchResource: "example.com/switch"})
	require.Equal(t, []string{"example.com/gpu", "example.com/switch"}, names(res))
	m := byName(res)
	assert.Len(t, m["example.com/gpu"].Devices, 8)
	assert.Equal(t, []string{"example.com/gpu=20"}, device(t, m["example.com/gpu"], "20").Values)
	assert.Equal(t, []string{"example.com/switch=43"}, device(t, m["example.com/switch"], "43").Values)
}

func TestScanPerModelNames(t *testing.T) {
	n, err := gpuname.NewNamer("", "")
	require.NoError(t, err)

	_, h := onVFIO(t, "a10")
	res := scanAll(t, &Scanner{Host: h, Namer: n, Resource: "ignored.example/gpu"})
	require.Equal(t, []string{"nvidia.com/GA102GL_A10"}, names(res), "per-model names win over the alias")
	assert.Equal(t, []string{"nvidia.com/GA102GL_A10=12"}, res[0].Devices[0].Values)

	_, h = onVFIO(t, "hgx-h100")
	res = scanAll(t, &Scanner{Host: h, Namer: n})
	require.Equal(t, []string{"nvidia.com/GH100_H100_SXM5_80GB", DefaultNVSwitchResource}, names(res),
		"NVSwitches keep their own resource")
	assert.Len(t, res[0].Devices, 8)
}

func TestPreflight(t *testing.T) {
	_, h := hostsim.NewHost(t, "a10")
	s := &Scanner{Host: h}
	scanAll(t, s)
	pf := s.LastPreflight()
	assert.True(t, pf.IOMMU)
	assert.Equal(t, []string{"0000:3b:00.0"}, pf.HostBoundGPUs)
	require.Len(t, pf.Problems(), 1)
	assert.Contains(t, pf.Problems()[0], "0000:3b:00.0")

	move(t, h, allNVIDIA, vfio.ToVFIO)
	scanAll(t, s)
	pf = s.LastPreflight()
	assert.True(t, pf.IOMMU)
	assert.Empty(t, pf.HostBoundGPUs)
	assert.Empty(t, pf.Problems(), "a bound node has nothing to fix")
	js, err := json.Marshal(pf)
	require.NoError(t, err)
	assert.JSONEq(t, `{"iommu":true,"hostBoundGPUs":[]}`, string(js), "an empty list, not null, in health output")

	_, h = hostsim.NewHost(t, "iommu-off")
	s = &Scanner{Host: h}
	assert.Empty(t, scanAll(t, s))
	pf = s.LastPreflight()
	assert.False(t, pf.IOMMU)
	require.NotEmpty(t, pf.Problems())
	assert.Contains(t, pf.Problems()[0], "IOMMU")

	// Only GPUs count: the workstation's audio/USB/UCSI and HGX NVSwitches
	// on host drivers are no preflight problem.
	_, h = hostsim.NewHost(t, "workstation")
	s = &Scanner{Host: h}
	scanAll(t, s)
	assert.Equal(t, []string{"0000:01:00.0"}, s.LastPreflight().HostBoundGPUs)
	_, h = hostsim.NewHost(t, "hgx-h100")
	s = &Scanner{Host: h}
	scanAll(t, s)
	assert.Len(t, s.LastPreflight().HostBoundGPUs, 8)
}

func TestDeviceCheckFollowsTheDriver(t *testing.T) {
	k, h := onVFIO(t, "hgx-h100")
	gpus := byName(scanAll(t, &Scanner{Host: h}))[DefaultResource]
	for _, d := range gpus.Devices {
		require.NotNil(t, d.Check)
		assert.NoError(t, d.Check(), "GPU %s is on vfio", d.ID)
	}

	toHost(t, h, hgxGPUs[0])
	require.Equal(t, "nvidia", k.DriverOf(hgxGPUs[0]))
	err := device(t, gpus, "20").Check()
	require.Error(t, err, "the device list taken before the move still checks the live host")
	assert.Contains(t, err.Error(), string(hgxGPUs[0]))
	assert.NoError(t, device(t, gpus, "21").Check(), "other GPUs are unaffected")

	// A vanished group node fails the check too, naming the node.
	node := filepath.Join(k.Root(), "dev", "vfio", "21")
	require.NoError(t, os.Remove(node))
	err = device(t, gpus, "21").Check()
	require.Error(t, err)
	assert.Contains(t, err.Error(), node)
}

func TestAllocateAnswersCDINamesFreshPerCall(t *testing.T) {
	_, h := onVFIO(t, "hgx-h100")
	gpus := byName(scanAll(t, &Scanner{Host: h}))[DefaultResource]
	devs := []deviceplugin.Device{device(t, gpus, "22"), device(t, gpus, "25")}

	first := gpus.Allocate(devs)
	require.NotNil(t, first)
	assert.Equal(t, []string{"nvidia.com/pgpu=22", "nvidia.com/pgpu=25"}, cdiNames(first), "CDI names equal the Values")
	assert.Empty(t, first.Envs)
	assert.Empty(t, first.Devices, "device specs are the framework's job")

	first.CdiDevices[0].Name = "tampered"
	first.CdiDevices = append(first.CdiDevices, &pluginapi.CDIDevice{Name: "extra"})
	second := gpus.Allocate(devs[:1])
	assert.Equal(t, []string{"nvidia.com/pgpu=22"}, cdiNames(second), "no state leaks between responses")
	assert.Equal(t, []string{"nvidia.com/pgpu=22"}, device(t, gpus, "22").Values, "the device's Values are untouched")

	assert.Empty(t, gpus.Allocate(nil).CdiDevices)
}

func cdiNames(r *pluginapi.ContainerAllocateResponse) []string {
	out := []string{}
	for _, c := range r.CdiDevices {
		out = append(out, c.Name)
	}
	return out
}

// sharedGroup is an A10 server without ACS: two GPUs in IOMMU group 12.
func sharedGroup(t *testing.T) (*hostsim.Kernel, *host.Host) {
	t.Helper()
	fx, err := hostsim.Lookup("a10")
	require.NoError(t, err)
	second := fx.Funcs[0]
	second.Address, second.NvidiaMinor = "0000:3c:00.0", 1
	fx.Funcs = append(fx.Funcs, second)
	k, err := fx.Build(t.TempDir())
	require.NoError(t, err)
	h := host.New(k.Options())
	move(t, h, allNVIDIA, vfio.ToVFIO)
	return k, h
}

// groupNodes counts the devices that pass each /dev/vfio/<group> node.
func groupNodes(r deviceplugin.Resource) map[string][]string {
	out := map[string][]string{}
	for _, d := range r.Devices {
		for _, p := range hostPaths(d) {
			if dir, name := filepath.Split(p); dir == "/dev/vfio/" && name != "vfio" {
				out[p] = append(out[p], d.ID)
			}
		}
	}
	return out
}

func TestScanSharedGroupIsOneDevice(t *testing.T) {
	_, h := sharedGroup(t)
	res := scanAll(t, &Scanner{Host: h})
	require.Equal(t, []string{DefaultResource}, names(res))
	assert.Equal(t, []string{"12"}, ids(res[0]), "the group is passed whole: one device")
}

// With iommufd the device IDs are vfioN cdevs, but VFIO ownership is still
// per IOMMU group: two pods must never be handed GPUs of one group.
func TestScanSharedGroupIsOneDeviceWithIOMMUFD(t *testing.T) {
	k, h := sharedGroup(t)
	require.NoError(t, k.EnableIOMMUFD())
	res := scanAll(t, &Scanner{Host: h})
	require.Equal(t, []string{DefaultResource}, names(res))
	for node, devs := range groupNodes(res[0]) {
		assert.Len(t, devs, 1, "%s is passed by several allocatable devices %v", node, devs)
	}
}

// With iommufd, the one device of a shared group carries the cdevs of
// every member of the group.
func TestSharedGroupDeviceCarriesEveryMembersCdev(t *testing.T) {
	k, h := sharedGroup(t)
	require.NoError(t, k.EnableIOMMUFD())
	res := scanAll(t, &Scanner{Host: h})
	require.Len(t, res, 1)
	require.Len(t, res[0].Devices, 1)
	cdevs := 0
	for _, s := range res[0].Devices[0].Specs {
		if strings.HasPrefix(s.HostPath, "/dev/vfio/devices/") {
			cdevs++
		}
	}
	assert.Equal(t, 2, cdevs)
}
