//go:build cgo

package cli

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu/nvmltypes"
)

// l40sNVML is go-nvml's mock answering as NVML on the L40S host: each
// card's PF by PCI bus id, its supported vGPU types as the driver names
// them; nothing creatable.
func l40sNVML(t *testing.T) *mock.Interface {
	fx, err := hostsim.Lookup("l40s-vgpu")
	require.NoError(t, err)
	cards := map[string]*mock.Device{}
	for _, card := range fx.VGPUs {
		var types []nvml.VgpuTypeId
		for _, ty := range card.Types {
			types = append(types, &mock.VgpuTypeId{
				GetIDFunc:              func() uint32 { return uint32(ty.ID) },
				GetNameFunc:            func() (string, nvml.Return) { return ty.Name, nvml.SUCCESS },
				GetFramebufferSizeFunc: func() (uint64, nvml.Return) { return uint64(ty.SizeGB) << 30, nvml.SUCCESS },
				GetMaxInstancesFunc:    func(nvml.Device) (int, nvml.Return) { return card.FramebufferGB / ty.SizeGB, nvml.SUCCESS },
			})
		}
		cards[card.PF] = &mock.Device{
			GetSupportedVgpusFunc: func() ([]nvml.VgpuTypeId, nvml.Return) { return types, nvml.SUCCESS },
			GetCreatableVgpusFunc: func() ([]nvml.VgpuTypeId, nvml.Return) { return nil, nvml.SUCCESS },
		}
	}
	return &mock.Interface{DeviceGetHandleByPciBusIdFunc: func(id string) (nvml.Device, nvml.Return) {
		if d, ok := cards[strings.ToLower(id)]; ok {
			return d, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}}
}

// TestRunNamesAFullCardFromNVML: the shipped `run` puts NVML behind its
// memory: in a fresh run folder over a card filled before (no list and no
// memory name its vGPUs), NVML names them, so the config holds and the node
// is success with both cards named; NVML is loaded once, from the driver
// root the flag gives, and shut down when the daemon ends. Without the
// NVML namer in the run loop this card is unnamed and the node failed
// (TestRunWithoutNVMLSaysSoOnceAndApplies).
func TestRunNamesAFullCardFromNVML(t *testing.T) {
	s := newSim(t, "l40s-vgpu")
	fillFirstGPU(t, s)
	lib := l40sNVML(t)
	var opens, shutdowns atomic.Int32
	var root atomic.Value
	p := ProgramWith(s.k, func(driverRoot string, log logr.Logger) Namer {
		root.Store(driverRoot)
		return nvmltypes.NewWith(func() (nvml.Interface, func() error, error) {
			opens.Add(1)
			return lib, func() error { shutdowns.Add(1); return nil }, nil
		}, log)
	})
	t.Run("daemon", func(t *testing.T) {
		d := startDaemon(t, s, p, "vgpu-nvml", "--driver-root", "/run/nvidia/driver")
		r := d.waitReady(t, "both cards named", func(r wire.VGPUReady) bool {
			return r.State == wire.VGPUStateSuccess && len(r.GPUs) == 2 && r.GPUs[1].VGPUs["L40S-24Q"] == 2
		})
		assert.Equal(t, map[string]int{"L40S-24Q": 2}, r.GPUs[0].VGPUs)
		assert.Empty(t, r.GPUs[0].Unnamed)
		assert.Equal(t, "L40S-24Q", r.GPUs[0].TypeIDs["1155"])
		assert.Empty(t, r.Refused)
	})
	assert.Equal(t, "/run/nvidia/driver", root.Load())
	assert.Equal(t, int32(1), opens.Load(), "loaded once")
	assert.Equal(t, int32(1), shutdowns.Load(), "shut down when run ends")
}
