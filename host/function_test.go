package host_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

func scan(t *testing.T, h *host.Host) *host.Snapshot {
	t.Helper()
	s, err := h.Scan()
	require.NoError(t, err)
	return s
}

func fn(t *testing.T, s *host.Snapshot, addr string) *host.Function {
	t.Helper()
	f, ok := s.Function(host.Address(addr))
	require.True(t, ok, "function %s missing", addr)
	return f
}

func addrsOf(fs []*host.Function) []host.Address {
	out := make([]host.Address, 0, len(fs))
	for _, f := range fs {
		out = append(out, f.Address)
	}
	return out
}

// TestScanEveryFixture checks that Scan reads back exactly what each
// fixture built: ids, roles, drivers, NUMA, groups and group membership.
func TestScanEveryFixture(t *testing.T) {
	fixtures := hostsim.Fixtures()
	require.GreaterOrEqual(t, len(fixtures), 7)
	for _, fx := range fixtures {
		t.Run(fx.Name, func(t *testing.T) {
			k, err := fx.Build(t.TempDir())
			require.NoError(t, err)
			s := scan(t, host.New(k.Options()))

			require.Len(t, s.Functions, len(fx.Funcs))
			assert.True(t, sort.SliceIsSorted(s.Functions, func(i, j int) bool {
				return s.Functions[i].Address < s.Functions[j].Address
			}))
			assert.Equal(t, fx.IOMMU, s.IOMMU.Enabled)
			assert.False(t, s.IOMMU.UnsafeNoIOMMU)
			if fx.IOMMU {
				assert.Equal(t, []string{"dmar0"}, s.IOMMU.Units)
			} else {
				assert.Empty(t, s.IOMMU.Units)
				assert.Empty(t, s.Groups)
			}

			wantGroups := map[int][]host.Address{}
			for _, want := range fx.Funcs {
				f := fn(t, s, want.Address)
				assert.Equal(t, want.Vendor, f.Vendor)
				assert.Equal(t, want.Device, f.Device)
				assert.Equal(t, want.SubVendor, f.SubsystemVendor)
				assert.Equal(t, want.SubDevice, f.SubsystemDevice)
				assert.Equal(t, want.Class, f.Class)
				assert.Equal(t, want.Driver, f.Driver)
				assert.Equal(t, want.NUMA, f.NUMANode)
				assert.Equal(t, want.Net, f.NetInterfaces)
				assert.Empty(t, f.DriverOverride, "(null) reads as empty")
				assert.Equal(t, host.RoleOf(want.Vendor, want.Class), f.Role)
				m, err := host.ParseModalias(f.Modalias)
				require.NoError(t, err)
				assert.Equal(t, uint32(want.Vendor), m.Vendor)
				assert.Equal(t, uint32(want.Device), m.Device)
				assert.Equal(t, uint8(want.Class>>16), m.BaseClass)
				if fx.IOMMU {
					assert.Equal(t, want.Group, f.IOMMUGroup)
					wantGroups[want.Group] = append(wantGroups[want.Group], f.Address)
				} else {
					assert.Equal(t, host.NoGroup, f.IOMMUGroup)
					assert.Equal(t, []*host.Function{f}, s.GroupMembers(f))
				}
			}
			require.Len(t, s.Groups, len(wantGroups))
			for id, members := range wantGroups {
				sort.Slice(members, func(i, j int) bool { return members[i] < members[j] })
				g := s.Groups[id]
				require.NotNil(t, g, "group %d", id)
				assert.Equal(t, id, g.ID)
				assert.Equal(t, "DMA-FQ", g.Type)
				assert.Equal(t, members, g.Members)
				for _, a := range members {
					f := fn(t, s, string(a))
					assert.Equal(t, members, addrsOf(s.GroupMembers(f)))
				}
			}
		})
	}
}

func TestScanWorkstationOneCardOneGroup(t *testing.T) {
	_, h := hostsim.NewHost(t, "workstation")
	s := scan(t, h)
	all := []host.Address{"0000:01:00.0", "0000:01:00.1", "0000:01:00.2", "0000:01:00.3"}
	roles := []host.Role{host.RoleGPU, host.RoleAudio, host.RoleUSB, host.RoleSerial}
	drivers := []string{"nvidia", "snd_hda_intel", "xhci_hcd", "nvidia-gpu"}
	for i, a := range all {
		f := fn(t, s, string(a))
		assert.Equal(t, roles[i], f.Role, a)
		assert.Equal(t, drivers[i], f.Driver, a)
		assert.Equal(t, "0000:01:00", f.Card())
		assert.Equal(t, all, addrsOf(s.CardFunctions(f)))
		assert.Equal(t, all, addrsOf(s.GroupMembers(f)))
	}
	require.Len(t, s.Groups, 1)
	assert.Equal(t, all, s.Groups[1].Members)
}

func TestScanHGX(t *testing.T) {
	_, h := hostsim.NewHost(t, "hgx-h100")
	s := scan(t, h)
	count := map[host.Role]int{}
	groups := map[int]bool{}
	for _, f := range s.Functions {
		count[f.Role]++
		assert.False(t, groups[f.IOMMUGroup], "group %d shared", f.IOMMUGroup)
		groups[f.IOMMUGroup] = true
		assert.Len(t, s.GroupMembers(f), 1)
		assert.Len(t, s.CardFunctions(f), 1)
	}
	assert.Equal(t, map[host.Role]int{host.RoleGPU: 8, host.RoleNVSwitch: 4, host.RoleOther: 4}, count)
	assert.Equal(t, 0, fn(t, s, "0000:18:00.0").NUMANode)
	assert.Equal(t, 1, fn(t, s, "0000:db:00.0").NUMANode)
	assert.Equal(t, "nvidia", fn(t, s, "0000:05:00.0").Driver)
	assert.Equal(t, []string{"ibp3s0"}, fn(t, s, "0000:bb:00.0").NetInterfaces)
}

func TestScanSharedNICGroup(t *testing.T) {
	_, h := hostsim.NewHost(t, "shared-nic")
	s := scan(t, h)
	gpu := fn(t, s, "0000:17:00.0")
	assert.Equal(t, []host.Address{"0000:17:00.0", "0000:18:00.0"}, addrsOf(s.GroupMembers(gpu)))
	assert.Equal(t, []host.Address{"0000:17:00.0"}, addrsOf(s.CardFunctions(gpu)))
	assert.Equal(t, []host.Address{"0000:65:00.0"}, addrsOf(s.GroupMembers(fn(t, s, "0000:65:00.0"))))
}

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

func TestAliasesAndModulesDir(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	as, err := h.Aliases()
	require.NoError(t, err)
	assert.Contains(t, as, host.Alias{Pattern: "vfio_pci:v*d*sv*sd*bc*sc*i*", Module: "vfio_pci"})

	o := k.Options()
	o.ModulesDir = ""
	dir, err := host.New(o).ModulesDir()
	require.NoError(t, err)
	assert.Equal(t, "/lib/modules/6.1.0-sim-amd64", dir)
	rel, err := host.New(o).KernelRelease()
	require.NoError(t, err)
	assert.Equal(t, "6.1.0-sim-amd64", rel)

	o.ModulesDir = t.TempDir() // no modules.alias at all
	as, err = host.New(o).Aliases()
	require.NoError(t, err)
	assert.Empty(t, as)

	testutil.WriteFile(t, filepath.Join(o.ModulesDir, "modules.alias"), "alias pci:v*\n")
	_, err = host.New(o).Aliases()
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(o.ModulesDir, "modules.alias"))
	assert.Contains(t, err.Error(), "line 1")

	testutil.WriteFile(t, filepath.Join(k.Root(), "proc", "sys", "kernel", "osrelease"), "../../etc\n")
	o.ModulesDir = ""
	_, err = host.New(o).ModulesDir()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "osrelease")
	assert.NotErrorIs(t, err, host.ErrNoKernelRelease, "an invalid release is not a missing one")

	require.NoError(t, os.Remove(filepath.Join(k.Root(), "proc", "sys", "kernel", "osrelease")))
	_, err = host.New(o).Aliases()
	require.ErrorIs(t, err, host.ErrNoKernelRelease)
	assert.Contains(t, err.Error(), filepath.Join(k.Root(), "proc", "sys", "kernel", "osrelease"))
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
