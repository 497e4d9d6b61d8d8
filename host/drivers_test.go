package host_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

func TestDriverSelection(t *testing.T) {
	_, gh := hostsim.NewHost(t, "gh200")
	aliases, err := gh.Aliases()
	require.NoError(t, err)
	s := scan(t, gh)
	gpu := fn(t, s, "0009:01:00.0")
	drv, mod := gh.VFIODriverFor(gpu, aliases)
	assert.Equal(t, "nvgrace_gpu_vfio_pci", drv)
	assert.Equal(t, "nvgrace_gpu_vfio_pci", mod)
	assert.Equal(t, "nvidia", gh.HostDriverFor(gpu, aliases))
	assert.Equal(t, "", gh.HostDriverFor(gpu, nil))

	_, ws := hostsim.NewHost(t, "workstation")
	aliases, err = ws.Aliases()
	require.NoError(t, err)
	s = scan(t, ws)
	want := map[string]string{"0000:01:00.0": "nvidia", "0000:01:00.1": "snd_hda_intel",
		"0000:01:00.2": "xhci_hcd", "0000:01:00.3": "nvidia-gpu"}
	for a, d := range want {
		f := fn(t, s, a)
		assert.Equal(t, d, ws.HostDriverFor(f, aliases), a)
		drv, mod := ws.VFIODriverFor(f, aliases)
		assert.Equal(t, "vfio-pci", drv, a)
		assert.Equal(t, "vfio_pci", mod, a)
	}
	assert.Equal(t, "", ws.HostDriverFor(fn(t, s, "0000:01:00.0"), nil))
	assert.Equal(t, "xhci_hcd", ws.DriverOfModule("xhci_pci"))
	assert.Equal(t, "vfio-pci", ws.DriverOfModule("vfio_pci"))
	assert.Equal(t, "", ws.DriverOfModule("../x"))

	_, hgx := hostsim.NewHost(t, "hgx-h100")
	aliases, err = hgx.Aliases()
	require.NoError(t, err)
	assert.Equal(t, "mlx5_core", hgx.HostDriverFor(fn(t, scan(t, hgx), "0000:19:00.0"), aliases))
}

func TestDriverOverrideRoundTrip(t *testing.T) {
	_, h := hostsim.NewHost(t, "a10")
	a := host.Address("0000:3b:00.0")
	require.NoError(t, h.SetDriverOverride(a, "vfio-pci"))
	f, err := h.ReadFunction(a)
	require.NoError(t, err)
	assert.Equal(t, "vfio-pci", f.DriverOverride)
	require.NoError(t, h.SetDriverOverride(a, ""))
	f, err = h.ReadFunction(a)
	require.NoError(t, err)
	assert.Equal(t, "", f.DriverOverride)
	assert.Error(t, h.SetDriverOverride(a, "../nvidia"))

	_, err = h.ReadFunction("0000:99:00.0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "0000:99:00.0")
}

func TestEnsureDriverLoadsModule(t *testing.T) {
	k, h := hostsim.NewHost(t, "gh200")
	assert.False(t, h.DriverLoaded("nvgrace_gpu_vfio_pci"))
	assert.True(t, h.DriverLoaded("vfio-pci"))
	assert.False(t, h.DriverLoaded("../bus"))
	require.NoError(t, h.EnsureDriver(context.Background(), "nvgrace_gpu_vfio_pci", "nvgrace_gpu_vfio_pci"))
	assert.True(t, h.DriverLoaded("nvgrace_gpu_vfio_pci"))

	err := h.EnsureDriver(context.Background(), "nope", "nope_mod")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nope_mod")

	o := k.Options()
	o.ModuleKernel = nil
	err = host.New(o).EnsureDriver(context.Background(), "nope", "nope_mod")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not loaded")
}

func TestDriverStateOf(t *testing.T) {
	fx, err := hostsim.Lookup("a10")
	require.NoError(t, err)
	k, err := fx.Build(t.TempDir())
	require.NoError(t, err)
	h := host.New(k.Options())
	st, err := h.DriverStateOf("vfio-pci", "vfio_pci")
	require.NoError(t, err)
	assert.Equal(t, host.DriverState{Driver: "vfio-pci", Module: "vfio_pci", Loaded: true, Loadable: true}, st)
	st, err = h.DriverStateOf("mdev_vfio", "mdev_vfio")
	require.NoError(t, err)
	assert.False(t, st.Loaded)
	assert.False(t, st.Loadable, "not in modules.dep")
}
