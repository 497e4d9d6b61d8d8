//go:build cgo

package nvmltypes

import (
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// vgpuNVML is go-nvml's mock answering as NVML does on the fixture's vGPU
// hosts: each card's PF by its PCI bus id (NVML's own form, eight-digit
// domain and upper case, and the short form), its supported vGPU types as
// the driver names them ("NVIDIA H100-40C"), their framebuffer (MiB) and max
// instances (framebuffer / size); creatable lists nothing (a full card).
// Any other bus id is ERROR_NOT_FOUND. edit, when set, changes a card's
// device before it is handed out.
func vgpuNVML(fx hostsim.Fixture, edit func(pf string, d *mock.Device)) *mock.Interface {
	devices := map[string]*mock.Device{}
	for _, card := range fx.VGPUs {
		d := &mock.Device{}
		var types []nvml.VgpuTypeId
		for _, t := range card.Types {
			t, fb := t, card.FramebufferGB
			types = append(types, &mock.VgpuTypeId{
				GetIDFunc:              func() uint32 { return uint32(t.ID) },
				GetNameFunc:            func() (string, nvml.Return) { return t.Name, nvml.SUCCESS },
				GetFramebufferSizeFunc: func() (uint64, nvml.Return) { return uint64(t.SizeGB) << 30, nvml.SUCCESS },
				GetMaxInstancesFunc: func(nvml.Device) (int, nvml.Return) {
					return fb / t.SizeGB, nvml.SUCCESS
				},
			})
		}
		d.GetSupportedVgpusFunc = func() ([]nvml.VgpuTypeId, nvml.Return) { return types, nvml.SUCCESS }
		d.GetCreatableVgpusFunc = func() ([]nvml.VgpuTypeId, nvml.Return) { return nil, nvml.SUCCESS }
		if edit != nil {
			edit(card.PF, d)
		}
		devices[strings.ToUpper("0000"+card.PF)] = d
	}
	return &mock.Interface{
		DeviceGetHandleByPciBusIdFunc: func(id string) (nvml.Device, nvml.Return) {
			if len(id) == len("0000:00:00.0") {
				id = "0000" + id
			}
			if d, ok := devices[strings.ToUpper(id)]; ok {
				return d, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
}

// opener counts how often NVML is loaded and shut down.
type opener struct {
	mu              sync.Mutex
	lib             nvml.Interface
	err             error
	opens, shutdown int
}

func (o *opener) open() (nvml.Interface, func() error, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.opens++
	if o.err != nil {
		return nil, nil, o.err
	}
	return o.lib, func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.shutdown++
		return nil
	}, nil
}

func (o *opener) counts() (int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.opens, o.shutdown
}

// logs records every line a logger writes.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

// count is how many lines contain s.
func (l *logs) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
