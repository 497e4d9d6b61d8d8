package host_test

import (
	"errors"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
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

func TestNoFunctionNamesTheFolder(t *testing.T) {
	sys := filepath.Join(t.TempDir(), "sys")
	err := host.New(host.Options{SysfsRoot: sys}).NoFunction("0000:99:00.0")
	var missing *host.NoFunctionError
	require.True(t, errors.As(err, &missing))
	assert.Equal(t, host.Address("0000:99:00.0"), missing.Address)
	assert.Equal(t, "no PCI function 0000:99:00.0 under "+filepath.Join(sys, "bus", "pci", "devices"), err.Error())
}
