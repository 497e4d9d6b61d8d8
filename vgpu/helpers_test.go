package vgpu

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

const testNode = "node-a"

// testConfig covers every vGPU fixture.
const testConfig = `version: v1
vgpu-configs:
  default:
    - device-filter: "0x223610DE"
      devices: all
      vgpu-devices: {"A10-12Q": 2}
    - device-filter: "0x20F110DE"
      devices: all
      vgpu-devices: {"A100-10C": 4}
    - device-filter: ["0x26B910DE"]
      devices: all
      vgpu-devices: {"L40S-24Q": 2}
    - device-filter: "0x1EB810DE"
      devices: all
      vgpu-devices: {"T4-8Q": 2}
  small:
    - devices: all
      device-filter: "0x223610DE"
      vgpu-devices: {"A10-4Q": 6}
    - devices: all
      device-filter: "0x20F110DE"
      vgpu-devices: {"A100-4C": 10}
    - devices: all
      device-filter: "0x26B910DE"
      vgpu-devices: {"L40S-8Q": 4, "L40S-8A": 2}
    - devices: all
      device-filter: "0x1EB810DE"
      vgpu-devices: {"T4-4Q": 4}
  none:
    - devices: all
      vgpu-devices: {}
`

func parse(t testing.TB, text string) *vgpuconfig.Config {
	t.Helper()
	c, err := vgpuconfig.Parse("test.yaml", []byte(text))
	require.NoError(t, err)
	return c
}

func fixture(t testing.TB, name string) (*hostsim.Kernel, *host.Host) {
	t.Helper()
	return hostsim.NewHost(t, name)
}

// runDirs is each test host's manager run folder, where its memory of
// vGPU type names lives (names.VGPUTypesFile).
var runDirs sync.Map // *host.Host -> string

// memoryOf is the manager's memory of type names on h as a freshly
// started manager reads it from its run folder: every plan of the
// helpers below is a new process over the same folder.
func memoryOf(t testing.TB, h *host.Host) *TypeMemory {
	t.Helper()
	dir, ok := runDirs.Load(h)
	if !ok {
		dir, _ = runDirs.LoadOrStore(h, t.TempDir())
	}
	m, err := LoadTypeMemory(filepath.Join(dir.(string), names.VGPUTypesFile), nil)
	require.NoError(t, err)
	return m
}

func planOf(t testing.TB, h *host.Host, cfg *vgpuconfig.Config, selected string, o Options) *Plan {
	t.Helper()
	if o.NodeName == "" {
		o.NodeName = testNode
	}
	if o.TypeNames == nil {
		o.TypeNames = memoryOf(t, h)
	}
	p, err := PlanConfig(context.Background(), h, cfg, selected, o)
	require.NoError(t, err)
	return p
}

// apply plans and applies a config.
func apply(t testing.TB, h *host.Host, cfg *vgpuconfig.Config, selected string, o Options, ao ApplyOptions) *Result {
	t.Helper()
	return Apply(context.Background(), h, planOf(t, h, cfg, selected, o), ao)
}

// state is every GPU's vGPUs by type and ID, as the host shows them and
// the manager names them.
func state(t testing.TB, h *host.Host) map[host.Address][]string {
	t.Helper()
	gpus, err := Inventory(h, memoryOf(t, h))
	require.NoError(t, err)
	out := map[host.Address][]string{}
	for _, g := range gpus {
		out[g.Address] = []string{}
		for _, v := range g.VGPUs {
			out[g.Address] = append(out[g.Address], v.Type+"@"+v.ID)
		}
	}
	return out
}

func countsOf(t testing.TB, h *host.Host) map[host.Address]map[string]int {
	t.Helper()
	gpus, err := Inventory(h, memoryOf(t, h))
	require.NoError(t, err)
	out := map[host.Address]map[string]int{}
	for _, g := range gpus {
		out[g.Address] = g.counts()
	}
	return out
}

func podClient(t testing.TB, socket string) *podresources.Client {
	t.Helper()
	c, err := podresources.New(socket, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func hostOf(k *hostsim.Kernel) *host.Host { return host.New(k.Options()) }
