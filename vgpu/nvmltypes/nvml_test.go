//go:build cgo

package nvmltypes

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// fullCard is a vGPU host whose config fills every card: the driver then
// lists no type anywhere.
type fullCard struct {
	fx     hostsim.Fixture
	config string // fills each card
	typ    string // its type
	id     string // the driver's id of it
	pfs    []string
}

func fullCards(t *testing.T) map[string]fullCard {
	l40s, err := hostsim.Lookup("l40s-vgpu")
	require.NoError(t, err)
	return map[string]fullCard{
		"H100 PCIe": {hostsim.H100VGPU(), `{"H100-40C": 2}`, "H100-40C", "1425", []string{"0000:5d:00.0"}},
		"two L40S":  {l40s, `{"L40S-24Q": 2}`, "L40S-24Q", "1155", []string{"0000:41:00.0", "0000:c1:00.0"}},
	}
}

// filled builds the host and fills its cards, naming the types from the
// driver's lists (a memory of that run only); it returns the host and the
// config.
func (c fullCard) filled(t *testing.T) (*hostsim.Kernel, *host.Host, *vgpuconfig.Config) {
	t.Helper()
	k, err := c.fx.Build(t.TempDir())
	require.NoError(t, err)
	h := host.New(k.Options())
	cfg, err := vgpuconfig.Parse("vgpu.yaml", []byte("version: v1\nvgpu-configs:\n  full:\n  - devices: all\n    vgpu-devices: "+c.config+"\n"))
	require.NoError(t, err)
	res := vgpu.Apply(t.Context(), h, plan(t, h, cfg, &vgpu.TypeMemory{}), vgpu.ApplyOptions{})
	require.True(t, res.OK(), "%v %v", res.Refused, res.Errors)
	for _, pf := range c.pfs {
		v, ok, err := h.VGPU(host.Address(pf[:len(pf)-1] + "4"))
		require.NoError(t, err)
		require.True(t, ok)
		require.Empty(t, v.Creatable, "%s is full: the driver lists nothing", pf)
	}
	return k, h, cfg
}

func plan(t *testing.T, h *host.Host, cfg *vgpuconfig.Config, names vgpu.TypeNamer) *vgpu.Plan {
	t.Helper()
	p, err := vgpu.PlanConfig(t.Context(), h, cfg, "full", vgpu.Options{NodeName: "node-1", TypeNames: names})
	require.NoError(t, err)
	return p
}

// freshMemory is a manager started over an empty run folder, NVML behind
// its memory.
func freshMemory(t *testing.T, nvml vgpu.TypeNamer) (*vgpu.TypeMemory, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), names.VGPUTypesFile)
	m, err := vgpu.LoadTypeMemory(file, nvml)
	require.NoError(t, err)
	return m, file
}

// TestFullCardNamedFromNVML: on full H100 and L40S cards (the driver lists
// nothing), a manager started over an empty run folder names every vGPU
// from NVML (its supported types; creatable lists nothing), plans nothing
// and refuses nothing; the ready report names the type; NVML is loaded
// once, only when an id is not named otherwise, and what it named is
// remembered in the run folder, so the next manager does not ask it.
func TestFullCardNamedFromNVML(t *testing.T) {
	for name, c := range fullCards(t) {
		t.Run(name, func(t *testing.T) {
			k, h, cfg := c.filled(t)
			o := &opener{lib: vgpuNVML(c.fx, nil)}
			var l logs
			n := NewWith(o.open, l.logger())
			mem, file := freshMemory(t, n)
			k.ResetWrites()
			p := plan(t, h, cfg, mem)
			assert.Empty(t, p.Refusals())
			assert.False(t, p.Changes(), "%v", vgpu.PlanReport(p).Actions)
			res := vgpu.Apply(t.Context(), h, p, vgpu.ApplyOptions{})
			require.True(t, res.OK(), "%v", res.Refused)
			assert.Empty(t, k.Writes())
			for i, g := range vgpu.ReadyGPUs(gpus(res)) {
				assert.Equal(t, map[string]int{c.typ: 2}, g.VGPUs, "GPU %d", i)
				assert.Equal(t, c.typ, g.TypeIDs[c.id], "GPU %d", i)
				assert.Empty(t, g.Unnamed, "GPU %d", i)
			}
			opens, _ := o.counts()
			assert.Equal(t, 1, opens, "NVML loaded once, on the first question")
			back, err := wire.ReadVGPUTypeNames(file)
			require.NoError(t, err)
			for _, pf := range c.pfs {
				assert.Equal(t, c.typ, back.GPUs[pf][c.id], "what NVML named is remembered")
			}
			require.NoError(t, n.Close())
			require.NoError(t, n.Close())
			_, shut := o.counts()
			assert.Equal(t, 1, shut, "shut down once")

			again, err := vgpu.LoadTypeMemory(file, NewWith(o.open, l.logger()))
			require.NoError(t, err)
			assert.Empty(t, plan(t, h, cfg, again).Refusals())
			opens, _ = o.counts()
			assert.Equal(t, 1, opens, "the remembered names need no NVML")
			assert.Equal(t, 1, l.count("NVML loaded"), l.String())
		})
	}
}

// TestNVMLNotAskedWhileTheListsName: while the driver's lists name every
// id (an empty card, a card with room left), NVML is not even loaded.
func TestNVMLNotAskedWhileTheListsName(t *testing.T) {
	c := fullCards(t)["H100 PCIe"]
	k, err := c.fx.Build(t.TempDir())
	require.NoError(t, err)
	h := host.New(k.Options())
	cfg, err := vgpuconfig.Parse("vgpu.yaml", []byte("version: v1\nvgpu-configs:\n  full:\n  - devices: all\n    vgpu-devices: {\"H100-20C\": 2}\n"))
	require.NoError(t, err)
	o := &opener{lib: vgpuNVML(c.fx, nil)}
	mem, _ := freshMemory(t, NewWith(o.open, (&logs{}).logger()))
	require.True(t, vgpu.Apply(t.Context(), h, plan(t, h, cfg, mem), vgpu.ApplyOptions{}).OK())
	assert.Empty(t, plan(t, h, cfg, mem).Refusals())
	opens, _ := o.counts()
	assert.Zero(t, opens)
}

func gpus(res *vgpu.Result) []*vgpu.GPU {
	var out []*vgpu.GPU
	for _, g := range res.GPUs {
		out = append(out, g.GPU)
	}
	return out
}

// broken is an NVML that cannot name the H100's types, and what the log
// says of it (once).
type broken struct {
	open Opener
	lib  nvml.Interface // nil: it cannot even be loaded
	say  string
}

func brokenNVMLs(fx hostsim.Fixture) map[string]broken {
	lib := func(say string, edit func(string, *mock.Device)) broken {
		l := vgpuNVML(fx, edit)
		return broken{func() (nvml.Interface, func() error, error) { return l, func() error { return nil }, nil }, l, say}
	}
	missing := fmt.Errorf("load NVML: libnvidia-ml.so.1 not found under driver root /x: %w", nvml.ERROR_LIBRARY_NOT_FOUND)
	return map[string]broken{
		"library missing": {open: func() (nvml.Interface, func() error, error) { return nil, nil, missing }, say: "NVML is not available"},
		"load panics":     {open: func() (nvml.Interface, func() error, error) { panic("dlsym: nvmlInit_v2") }, say: "NVML is not available"},
		"not supported": lib("ERROR_NOT_SUPPORTED", func(_ string, d *mock.Device) {
			d.GetSupportedVgpusFunc = func() ([]nvml.VgpuTypeId, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		}),
		"a call panics": lib("panicked", func(_ string, d *mock.Device) {
			d.GetSupportedVgpusFunc = func() ([]nvml.VgpuTypeId, nvml.Return) { panic("nvmlDeviceGetSupportedVgpus: symbol not found") }
		}),
		"no such GPU": {open: func() (nvml.Interface, func() error, error) { return vgpuNVML(hostsim.Fixture{}, nil), nil, nil },
			lib: vgpuNVML(hostsim.Fixture{}, nil), say: "ERROR_NOT_FOUND"},
	}
}

// TestNVMLFailuresFallBackToMemory: an NVML that cannot name the types
// (library missing, ERROR_NOT_SUPPORTED, a call that panics, a GPU it does
// not know) fails nothing: a manager that remembers the names applies as
// before, one that does not reports the vGPUs as unnamed (refused, never
// counted); the failure is logged once however often it is asked.
func TestNVMLFailuresFallBackToMemory(t *testing.T) {
	c := fullCards(t)["H100 PCIe"]
	_, h, cfg := c.filled(t)
	// The memory of the manager that filled the card.
	remembered := filepath.Join(t.TempDir(), names.VGPUTypesFile)
	m, err := vgpu.LoadTypeMemory(remembered, nil)
	require.NoError(t, err)
	m.Learn("0000:5d:00.0", map[int]string{1425: "H100-40C"})
	require.NoError(t, m.Save())

	for name, b := range brokenNVMLs(c.fx) {
		t.Run(name, func(t *testing.T) {
			var l logs
			n := NewWith(b.open, l.logger())
			mem, err := vgpu.LoadTypeMemory(remembered, n)
			require.NoError(t, err)
			p := plan(t, h, cfg, mem)
			assert.Empty(t, p.Refusals(), "remembered: named without NVML")
			assert.False(t, p.Changes())

			fresh, _ := freshMemory(t, n)
			for range 2 {
				p = plan(t, h, cfg, fresh)
				require.Len(t, p.Refusals(), 1)
				assert.Contains(t, p.Refusals()[0].Reason, "type id 1425")
				res := vgpu.Apply(t.Context(), h, p, vgpu.ApplyOptions{})
				ready := vgpu.ReadyGPUs(gpus(res))
				assert.Empty(t, ready[0].VGPUs, "unnamed vGPUs are no type")
				assert.Equal(t, map[string]string{"0000:5d:00.4": "1425", "0000:5d:00.5": "1425"}, ready[0].Unnamed)
			}
			assert.Equal(t, 1, l.count(b.say), "logged once: %s", l.String())
			assert.Equal(t, 1, l.count(`"error"=`), "one failure, one line: %s", l.String())
		})
	}
}

// TestIDNVMLDoesNotKnowStaysUnnamed: NVML names the H100's types but not
// the id a VF holds: it stays unnamed, reported, never guessed.
func TestIDNVMLDoesNotKnowStaysUnnamed(t *testing.T) {
	c := fullCards(t)["H100 PCIe"]
	_, h, cfg := c.filled(t)
	o := &opener{lib: vgpuNVML(c.fx, func(_ string, d *mock.Device) {
		all, _ := d.GetSupportedVgpus()
		var without []nvml.VgpuTypeId
		for _, id := range all {
			if id.GetID() != 1425 {
				without = append(without, id)
			}
		}
		d.GetSupportedVgpusFunc = func() ([]nvml.VgpuTypeId, nvml.Return) { return without, nvml.SUCCESS }
	})}
	mem, file := freshMemory(t, NewWith(o.open, (&logs{}).logger()))
	p := plan(t, h, cfg, mem)
	require.Len(t, p.Refusals(), 1)
	assert.Contains(t, p.Refusals()[0].Reason, "type id 1425")
	ready := vgpu.ReadyGPUs(gpus(vgpu.Apply(t.Context(), h, p, vgpu.ApplyOptions{})))
	assert.Equal(t, map[string]string{"0000:5d:00.4": "1425", "0000:5d:00.5": "1425"}, ready[0].Unnamed)
	back, err := wire.ReadVGPUTypeNames(file)
	require.NoError(t, err)
	assert.Equal(t, "H100-20C", back.GPUs["0000:5d:00.0"]["1424"], "the types NVML does name are remembered")
	assert.NotContains(t, back.GPUs["0000:5d:00.0"], "1425")
}

// TestTypes: the strict reading names the GPU and wraps the nvml.Return;
// a type NVML cannot name is left out and named; a panic is an error; the
// framebuffer and max instances come along.
func TestTypes(t *testing.T) {
	fx := hostsim.H100VGPU()
	types, err := Types(vgpuNVML(fx, nil), "0000:5d:00.0")
	require.NoError(t, err)
	require.Len(t, types, len(fx.VGPUs[0].Types))
	assert.Contains(t, types, Type{ID: 1425, Name: "NVIDIA H100-40C", FramebufferMiB: 40 << 10, MaxInstances: 2})

	_, err = Types(vgpuNVML(fx, nil), "0000:99:00.0")
	require.ErrorIs(t, err, nvml.ERROR_NOT_FOUND)
	assert.Contains(t, err.Error(), "GPU 0000:99:00.0")

	for name, b := range brokenNVMLs(fx) {
		if b.lib == nil {
			continue
		}
		_, err := Types(b.lib, "0000:5d:00.0")
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "GPU 0000:5d:00.0", name)
		assert.Contains(t, err.Error(), b.say, name)
	}
	_, err = Types(vgpuNVML(fx, func(_ string, d *mock.Device) {
		d.GetSupportedVgpusFunc = func() ([]nvml.VgpuTypeId, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	}), "0000:5d:00.0")
	assert.ErrorIs(t, err, nvml.ERROR_NOT_SUPPORTED)

	named := vgpuNVML(fx, func(_ string, d *mock.Device) {
		all, _ := d.GetSupportedVgpus()
		all[0].(*mock.VgpuTypeId).GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		// A creatable type the supported list lacks counts too.
		extra := &mock.VgpuTypeId{GetIDFunc: func() uint32 { return 9999 },
			GetNameFunc:            func() (string, nvml.Return) { return "NVIDIA H100-80C", nvml.SUCCESS },
			GetFramebufferSizeFunc: func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
			GetMaxInstancesFunc:    func(nvml.Device) (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }}
		d.GetCreatableVgpusFunc = func() ([]nvml.VgpuTypeId, nvml.Return) { return append([]nvml.VgpuTypeId{all[1]}, extra), nvml.SUCCESS }
	})
	types, err = Types(named, "0000:5d:00.0")
	require.ErrorIs(t, err, nvml.ERROR_UNKNOWN)
	assert.Contains(t, err.Error(), fmt.Sprintf("vGPU type %d", fx.VGPUs[0].Types[0].ID))
	assert.Len(t, types, len(fx.VGPUs[0].Types), "the others, and the creatable one")
	assert.Contains(t, types, Type{ID: 9999, Name: "NVIDIA H100-80C"})
	assert.True(t, errors.Is(err, nvml.ERROR_UNKNOWN))
}
