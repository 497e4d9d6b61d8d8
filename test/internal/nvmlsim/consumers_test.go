package nvmlsim_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/nvmlsim"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu/nvmltypes"
)

// The vGPU device manager's question (vgpu/nvmltypes.Types) on two L40S
// with the vGPU host driver: the supported types by id and name, with
// their framebuffer and max instances; creatable ones appear with VFs.
func TestL40SVGPUTypesThroughNVMLTypes(t *testing.T) {
	k, _ := hostsim.NewHost(t, "l40s-vgpu")
	lib := open(t, k.Root())
	n, ret := lib.DeviceGetCount()
	require.Equal(t, nvml.SUCCESS, ret)
	require.Equal(t, 2, n)

	types, err := nvmltypes.Types(lib, "0000:41:00.0")
	require.NoError(t, err)
	require.Len(t, types, 23, "the L40S's published types: 2 B, 10 Q, 10 A, and L40S-3B")
	first := types[0]
	assert.Equal(t, nvmltypes.Type{ID: 1145, Name: "NVIDIA L40S-1B", FramebufferMiB: 1024, MaxInstances: 32}, first)
	i := slices.IndexFunc(types, func(ty nvmltypes.Type) bool { return ty.ID == 2164 })
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, "NVIDIA L40S-3B", types[i].Name)
	assert.Equal(t, 16, types[i].MaxInstances, "48 GB / 3 GB")

	d, _ := lib.DeviceGetHandleByPciBusId("0000:41:00.0")
	creatable, ret := d.GetCreatableVgpus()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Empty(t, creatable, "VFs are disabled at boot: nothing can be created")

	require.NoError(t, k.WriteFile(filepath.Join(k.Root(), "sys/bus/pci/devices/0000:41:00.0/sriov_numvfs"), []byte("4")))
	require.Equal(t, nvml.SUCCESS, lib.Shutdown())
	require.Equal(t, nvml.SUCCESS, lib.Init())
	n, _ = lib.DeviceGetCount()
	assert.Equal(t, 2, n, "VFs are not GPUs to NVML")
	d, _ = lib.DeviceGetHandleByPciBusId("0000:41:00.0")
	creatable, ret = d.GetCreatableVgpus()
	require.Equal(t, nvml.SUCCESS, ret)
	assert.Len(t, creatable, 23, "every type can be created on a fresh VF")

	_, err = nvmltypes.Types(lib, "0000:99:00.0")
	assert.ErrorContains(t, err, "GPU 0000:99:00.0: NVML device by PCI bus id: Not Found", "the real library's text, from nvmlErrorString")
}

// gpucdi's inventory (the NRI plugin's generator) from the real library
// path: every GPU with its index, minor and UUID; MIG asked and disabled.
func TestGPUCDIDiscoverHGXH100(t *testing.T) {
	k, _ := hostsim.NewHost(t, "hgx-h100")
	inv, err := gpucdi.Discover(open(t, k.Root()))
	require.NoError(t, err)
	assert.Equal(t, nvmlsim.DriverVersion, inv.DriverVersion)
	require.Len(t, inv.GPUs, 8)
	for i, g := range inv.GPUs {
		assert.Equal(t, gpucdi.GPU{Index: i, Minor: i, UUID: g.UUID}, g)
	}
	assert.Equal(t, hostsim.SimulatedGPUUUID("0000:18:00.0"), inv.GPUs[0].UUID)
}

// The NRI plugin's `generate-cdi` (cgo) dlopens the simulated library
// from a driver root and writes a spec naming the fixture's GPUs.
func TestGenerateCDIFromSimulatedNVML(t *testing.T) {
	lib := library(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "nri-gpu-plugin")
	// Built in the product module, as it ships (its replacements apply):
	// the test module's directory is test/, the product's its parent.
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/nri-gpu-plugin")
	build.Dir = productRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=1", "GOWORK=off", "GOFLAGS=")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build nri-gpu-plugin with cgo: %s", out)

	type gpu struct {
		addr  host.Address
		minor int
	}
	h100 := []gpu{}
	for i, b := range []string{"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"} {
		h100 = append(h100, gpu{host.Address("0000:" + b + ":00.0"), i})
	}
	for _, fx := range []struct {
		name string
		gpus []gpu          // what the spec names, index by index
		vfio []host.Address // moved to vfio-pci first
	}{
		{name: "a10", gpus: []gpu{{"0000:3b:00.0", 0}}},
		{name: "hgx-h100", gpus: h100},
		{name: "a10x2", gpus: []gpu{{"0000:af:00.0", 1}}, vfio: []host.Address{"0000:3b:00.0"}},
	} {
		t.Run(fx.name, func(t *testing.T) {
			k, h := hostsim.NewHost(t, fx.name)
			for _, a := range fx.vfio {
				require.NoError(t, h.SetDriverOverride(a, "vfio-pci"))
				require.NoError(t, h.Unbind(a, "nvidia"))
				require.NoError(t, h.Probe(a))
			}
			driverRoot := t.TempDir()
			require.NoError(t, nvmlsim.DriverRoot(driverRoot, lib))
			cdiDir := t.TempDir()
			cmd := exec.CommandContext(ctx, bin, "generate-cdi", "--cdi-dir", cdiDir, "--check-cdi-dir", cdiDir,
				"--driver-root", driverRoot, "--lib-dir", nvmlsim.LibDir,
				"--dev-root", filepath.Join(k.Root(), "dev"), "--proc-root", filepath.Join(k.Root(), "proc"))
			cmd.Env = append(os.Environ(), nvmlsim.RootEnv+"="+k.Root())
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "generate-cdi: %s", out)
			assert.Contains(t, string(out), "written ")

			files, err := filepath.Glob(filepath.Join(cdiDir, "*"))
			require.NoError(t, err)
			require.Len(t, files, 1, "one spec")
			b, err := os.ReadFile(files[0])
			require.NoError(t, err)
			var spec struct {
				Kind           string
				ContainerEdits struct {
					Mounts []struct {
						ContainerPath string `json:"containerPath"`
					}
				} `json:"containerEdits"`
				Devices []struct {
					Name           string
					ContainerEdits struct {
						DeviceNodes []struct{ Path string } `json:"deviceNodes"`
					} `json:"containerEdits"`
				}
			}
			require.NoError(t, yaml.Unmarshal(b, &spec), "%s", b)
			assert.Equal(t, "nvidia.com/gpu", spec.Kind)
			names := map[string][]string{}
			for _, d := range spec.Devices {
				for _, n := range d.ContainerEdits.DeviceNodes {
					names[d.Name] = append(names[d.Name], n.Path)
				}
			}
			for i, g := range fx.gpus {
				node := fmt.Sprintf("/dev/nvidia%d", g.minor)
				assert.Equal(t, []string{node}, names[strconv.Itoa(i)], "device %d is %s", i, g.addr)
				assert.Equal(t, []string{node}, names[hostsim.SimulatedGPUUUID(g.addr)], "device %s", g.addr)
			}
			assert.NotContains(t, names, strconv.Itoa(len(fx.gpus)), "no more GPUs than on nvidia")
			for _, a := range fx.vfio {
				assert.NotContains(t, names, hostsim.SimulatedGPUUUID(a), "a GPU on vfio-pci is not in the spec")
			}
			var mounts []string
			for _, m := range spec.ContainerEdits.Mounts {
				mounts = append(mounts, m.ContainerPath)
			}
			for _, p := range []string{nvmlsim.LibDir + "/libcuda.so." + nvmlsim.DriverVersion, nvmlsim.LibDir + "/libnvidia-ml.so.1", "/usr/bin/nvidia-smi"} {
				assert.Contains(t, mounts, p, "the simulated driver root's files are mounted")
			}
		})
	}
}

// productRoot is the product module's folder: the parent of the test
// module's (this package is test/internal/nvmlsim).
func productRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "cmd", "nri-gpu-plugin"))
	require.NoError(t, err, "the product module's nri-gpu-plugin")
	return root
}
