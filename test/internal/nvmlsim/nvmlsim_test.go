package nvmlsim_test

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/nvmlsim"
)

// built is the simulated library TestMain builds once for the package.
var built struct {
	path string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nvmlsim-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	start := time.Now()
	built.path, built.err = nvmlsim.Build(ctx, dir)
	cancel()
	fmt.Fprintf(os.Stderr, "nvmlsim: built %s in %s\n", built.path, time.Since(start).Round(time.Millisecond))
	if built.err == nil {
		// A Go c-shared library cannot be unloaded: an anchor keeps it
		// loaded (its init fails, no root is set, so NVML stays
		// uninitialised) while the tests init and shut down their own.
		os.Unsetenv(nvmlsim.RootEnv)
		anchor = nvml.New(nvml.WithLibraryPath(built.path))
		anchorInit = anchor.Init()
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	anchor     nvml.Interface
	anchorInit nvml.Return
)

// library returns the built library's path, failing the test when the
// build failed.
func library(t *testing.T) string {
	t.Helper()
	require.NoError(t, built.err, "build the simulated NVML")
	return built.path
}

// open initialises the simulated NVML on the fixture's host and shuts it
// down at the end of the test.
func open(t *testing.T, root string) nvml.Interface {
	t.Helper()
	t.Setenv(nvmlsim.RootEnv, root)
	lib := nvml.New(nvml.WithLibraryPath(library(t)))
	require.Equal(t, nvml.SUCCESS, lib.Init(), "nvmlInit on %s", root)
	t.Cleanup(func() { assert.Equal(t, nvml.SUCCESS, lib.Shutdown()) })
	return lib
}

func TestUninitialisedBeforeInit(t *testing.T) {
	library(t)
	assert.Equal(t, nvml.ERROR_UNKNOWN, anchorInit, "no root: init fails")
	_, ret := anchor.DeviceGetCount()
	assert.Equal(t, nvml.ERROR_UNINITIALIZED, ret)
	_, ret = anchor.SystemGetDriverVersion()
	assert.Equal(t, nvml.ERROR_UNINITIALIZED, ret)
	_, ret = anchor.DeviceGetHandleByIndex(0)
	assert.Equal(t, nvml.ERROR_UNINITIALIZED, ret)
	v, ret := anchor.SystemGetNVMLVersion()
	assert.Equal(t, nvml.SUCCESS, ret, "the NVML version is answered before init")
	assert.Equal(t, nvmlsim.NVMLVersion, v)

	// After init and shutdown, uninitialised again.
	k, _ := hostsim.NewHost(t, "a10")
	t.Setenv(nvmlsim.RootEnv, k.Root())
	lib := nvml.New(nvml.WithLibraryPath(library(t)))
	require.Equal(t, nvml.SUCCESS, lib.Init())
	// go-nvml asks the library loaded last for its texts (a global it
	// resets when any library object closes).
	assert.Equal(t, "Uninitialized", nvml.ERROR_UNINITIALIZED.Error(), "nvmlErrorString")
	assert.Equal(t, "GPU is lost", nvml.ERROR_GPU_IS_LOST.Error(), "nvmlErrorString")
	n, ret := anchor.DeviceGetCount()
	require.Equal(t, nvml.SUCCESS, ret, "one process, one NVML: the anchor sees the init")
	assert.Equal(t, 1, n)
	require.Equal(t, nvml.SUCCESS, lib.Shutdown())
	_, ret = anchor.DeviceGetCount()
	assert.Equal(t, nvml.ERROR_UNINITIALIZED, ret)
}

func TestInitWithoutDriver(t *testing.T) {
	t.Setenv(nvmlsim.RootEnv, t.TempDir())
	lib := nvml.New(nvml.WithLibraryPath(library(t)))
	assert.Equal(t, nvml.ERROR_DRIVER_NOT_LOADED, lib.Init(), "a host without nvidia.ko loaded")
}

func TestA10(t *testing.T) {
	k, _ := hostsim.NewHost(t, "a10")
	lib := open(t, k.Root())

	v, ret := lib.SystemGetDriverVersion()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, nvmlsim.DriverVersion, v)
	cuda, ret := lib.SystemGetCudaDriverVersion_v2()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, 13000, cuda)

	n, ret := lib.DeviceGetCount()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Equal(t, 1, n)
	d, ret := lib.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)
	uuid, ret := d.GetUUID()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, hostsim.SimulatedGPUUUID("0000:3b:00.0"), uuid, "the UUID the simulated driver shows in /proc")
	name, ret := d.GetName()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, "NVIDIA A10", name)
	minor, ret := d.GetMinorNumber()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, 0, minor)
	pci, ret := d.GetPciInfo()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, "00000000:3B:00.0", cString(pci.BusId[:]))
	assert.Equal(t, "0000:3B:00.0", cString(pci.BusIdLegacy[:]))
	assert.Equal(t, uint32(0x223610de), pci.PciDeviceId)
	assert.Equal(t, uint32(0x16c110de), pci.PciSubSystemId)
	assert.Equal(t, [3]uint32{0, 0x3b, 0}, [3]uint32{pci.Domain, pci.Bus, pci.Device})
	mem, ret := d.GetMemoryInfo()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, uint64(23028)<<20, mem.Total)
	assert.Equal(t, mem.Total, mem.Free+mem.Used)
	major, minorCC, ret := d.GetCudaComputeCapability()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, [2]int{8, 6}, [2]int{major, minorCC})
	_, _, ret = d.GetMigMode()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "an A10 has no MIG")
	_, ret = d.GetSupportedVgpus()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "the data-centre driver has no vGPU")
	_, ret = d.GetPersistenceMode()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret, "persistence: a stub until issue 22 item 5")

	byUUID, ret := lib.DeviceGetHandleByUUID(uuid)
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, d, byUUID, "one handle per GPU")
	for _, id := range []string{"0000:3b:00.0", "00000000:3B:00.0", "3b:00.0"} {
		byBus, ret := lib.DeviceGetHandleByPciBusId(id)
		require.Equal(t, nvml.SUCCESS, ret, id)
		assert.Equal(t, d, byBus, id)
	}
	_, ret = lib.DeviceGetHandleByPciBusId("0000:af:00.0")
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret)
	_, ret = lib.DeviceGetHandleByPciBusId("not-a-bus-id")
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
	_, ret = lib.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret)
	_, ret = lib.DeviceGetHandleByIndex(1)
	assert.Equal(t, nvml.ERROR_INVALID_ARGUMENT, ret)
}

// cString is the text before the first NUL.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func TestHGXH100InPCIOrderWithStableUUIDs(t *testing.T) {
	k, _ := hostsim.NewHost(t, "hgx-h100")
	uuids := func() []string {
		lib := nvml.New(nvml.WithLibraryPath(library(t)))
		t.Setenv(nvmlsim.RootEnv, k.Root())
		require.Equal(t, nvml.SUCCESS, lib.Init())
		defer func() { require.Equal(t, nvml.SUCCESS, lib.Shutdown()) }()
		n, ret := lib.DeviceGetCount()
		require.Equal(t, nvml.SUCCESS, ret)
		require.Equal(t, 8, n, "8 GPUs; the NVSwitches are not GPUs")
		var out []string
		for i := range n {
			d, ret := lib.DeviceGetHandleByIndex(i)
			require.Equal(t, nvml.SUCCESS, ret)
			u, ret := d.GetUUID()
			require.Equal(t, nvml.SUCCESS, ret)
			m, ret := d.GetMinorNumber()
			require.Equal(t, nvml.SUCCESS, ret)
			assert.Equal(t, i, m, "minor numbers follow the PCI order here")
			idx, ret := d.GetIndex()
			require.Equal(t, nvml.SUCCESS, ret)
			assert.Equal(t, i, idx)
			name, _ := d.GetName()
			assert.Equal(t, "NVIDIA H100 80GB HBM3", name)
			cur, pending, ret := d.GetMigMode()
			require.Equal(t, nvml.SUCCESS, ret, "an H100 is MIG-capable")
			assert.Equal(t, [2]int{nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE}, [2]int{cur, pending})
			pci, _ := d.GetPciInfo()
			out = append(out, u)
			assert.Equal(t, hostsim.SimulatedGPUUUID(host.Address(fmt.Sprintf("0000:%02x:00.0", pci.Bus))), u)
		}
		return out
	}
	first := uuids()
	buses := []string{"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"}
	for i, b := range buses {
		assert.Equal(t, hostsim.SimulatedGPUUUID(host.Address("0000:"+b+":00.0")), first[i], "index %d is bus %s", i, b)
	}
	assert.Equal(t, first, uuids(), "the same UUIDs in the same order after a re-init")
}

func TestGPUOnVFIOIsNotSeenAndARemovedGPUIsGone(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10x2")
	lib := open(t, k.Root())
	n, _ := lib.DeviceGetCount()
	require.Equal(t, 2, n)
	first, _ := lib.DeviceGetHandleByIndex(0)

	a := host.Address("0000:3b:00.0")
	require.NoError(t, h.SetDriverOverride(a, "vfio-pci"))
	require.NoError(t, h.Unbind(a, "nvidia"))
	require.NoError(t, h.Probe(a))
	require.Equal(t, "vfio-pci", k.DriverOf(a))
	_, ret := first.GetUUID()
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret, "a handle to a GPU that left the driver")

	reinit := func() nvml.Interface {
		require.Equal(t, nvml.SUCCESS, lib.Shutdown())
		require.Equal(t, nvml.SUCCESS, lib.Init())
		return lib
	}
	reinit()
	n, _ = lib.DeviceGetCount()
	require.Equal(t, 1, n, "the GPU on vfio-pci is not seen")
	d, _ := lib.DeviceGetHandleByIndex(0)
	pci, _ := d.GetPciInfo()
	assert.Equal(t, "00000000:AF:00.0", cString(pci.BusId[:]), "index 0 is now the other GPU")
	_, ret = lib.DeviceGetHandleByPciBusId(string(a))
	assert.Equal(t, nvml.ERROR_NOT_FOUND, ret)

	// The kernel removes a GPU (echo 1 > remove): its folder goes.
	require.NoError(t, os.Remove(filepath.Join(k.Root(), "sys/bus/pci/devices/0000:af:00.0")))
	_, ret = d.GetName()
	assert.Equal(t, nvml.ERROR_GPU_IS_LOST, ret)
	reinit()
	n, ret = lib.DeviceGetCount()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, 0, n, "a removed GPU is gone")

	// Back on nvidia: seen again, with its UUID.
	require.NoError(t, h.SetDriverOverride(a, ""))
	require.NoError(t, h.Unbind(a, "vfio-pci"))
	require.NoError(t, h.Probe(a))
	reinit()
	n, _ = lib.DeviceGetCount()
	require.Equal(t, 1, n)
	d, _ = lib.DeviceGetHandleByIndex(0)
	u, _ := d.GetUUID()
	assert.Equal(t, hostsim.SimulatedGPUUUID(a), u)
	assert.Equal(t, first, d, "the same handle for the same GPU")
}

// The calls NVIDIA's device plugin makes at start and in its health check
// beyond our own code's: each answers, none is a missing symbol.
func TestDevicePluginCalls(t *testing.T) {
	k, _ := hostsim.NewHost(t, "a10")
	lib := open(t, k.Root())
	d, ret := lib.DeviceGetHandleByIndex(0)
	require.Equal(t, nvml.SUCCESS, ret)

	arch, ret := d.GetArchitecture()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, nvml.DeviceArchitecture(nvml.DEVICE_ARCH_AMPERE), arch)
	brand, ret := d.GetBrand()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, nvml.BRAND_NVIDIA, brand)
	mode, ret := d.GetVirtualizationMode()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, nvml.GPU_VIRTUALIZATION_MODE_NONE, mode)
	procs, ret := d.GetComputeRunningProcesses()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Empty(t, procs)
	isMig, ret := d.IsMigDeviceHandle()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.False(t, isMig)
	_, ret = d.GetGpuFabricInfo()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)
	_, ret = d.GetAttributes()
	assert.Equal(t, nvml.ERROR_NOT_SUPPORTED, ret)

	set, ret := lib.EventSetCreate()
	require.Equal(t, nvml.SUCCESS, ret)
	types, ret := d.GetSupportedEventTypes()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.NotZero(t, types&nvml.EventTypeXidCriticalError)
	require.Equal(t, nvml.SUCCESS, d.RegisterEvents(nvml.EventTypeXidCriticalError, set))
	start := time.Now()
	_, ret = set.Wait(50)
	assert.Equal(t, nvml.ERROR_TIMEOUT, ret, "a healthy GPU raises no event")
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "the wait lasts the caller's timeout")
	assert.Equal(t, nvml.SUCCESS, set.Free())

	vk, _ := hostsim.NewHost(t, "l40s-vgpu")
	require.Equal(t, nvml.SUCCESS, lib.Shutdown())
	t.Setenv(nvmlsim.RootEnv, vk.Root())
	require.Equal(t, nvml.SUCCESS, lib.Init())
	d, _ = lib.DeviceGetHandleByIndex(0)
	mode, ret = d.GetVirtualizationMode()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Equal(t, nvml.GPU_VIRTUALIZATION_MODE_HOST_VGPU, mode, "the vGPU host driver")
}

// The library carries the real one's SONAME, which nvidia-ctk reads to
// make its links in a container.
func TestSONAME(t *testing.T) {
	f, err := elf.Open(library(t))
	require.NoError(t, err)
	defer f.Close()
	names, err := f.DynString(elf.DT_SONAME)
	require.NoError(t, err)
	assert.Equal(t, []string{nvmlsim.Library}, names)
}
