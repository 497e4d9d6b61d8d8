package vgpu

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

// Backend is how a GPU makes vGPUs, decided from what sysfs offers.
type Backend string

// Backends.
const (
	// BackendMdev: mdev_supported_types on the GPU itself.
	BackendMdev Backend = "mdev"
	// BackendMdevSRIOV: Ampere with SR-IOV: the VFs are mdev parents, one
	// vGPU per VF.
	BackendMdevSRIOV Backend = "mdev-sriov"
	// BackendVendorVFIO: Ada, Hopper, Blackwell: nvidia/current_vgpu_type
	// per VF.
	BackendVendorVFIO Backend = "vendor-vfio"
	// BackendSRIOV: SR-IOV VFs not enabled yet; once they are, the GPU is
	// mdev-sriov or vendor-vfio.
	BackendSRIOV Backend = "sriov"
	// BackendNone: no vGPU types visible (no vGPU host driver loaded).
	BackendNone Backend = "none"
)

// GPU is one NVIDIA GPU (a PF of class 0x03xx) and its vGPU state.
type GPU struct {
	Index    int // order among NVIDIA GPUs by PCI address, as NVIDIA's tool numbers them
	Address  host.Address
	ID       vgpuconfig.DeviceID
	Backend  Backend
	TotalVFs int
	VFs      []host.Address // enabled VFs
	Types    []TypeInfo     // what it can host
	VGPUs    []VGPU         // what it holds
	// Names are the vendor-specific VFIO type ids the GPU's types can be
	// named by (the driver's lists now, then what the TypeNamer knows:
	// remembered, or NVML's); nil for other backends.
	Names map[int]string

	mdevNames map[string]string // Parent.Types of a parent that is no NVIDIA GPU
}

// Describe names the GPU in messages: "GPU 0 (0000:3b:00.0, 10de:2236)".
func (g *GPU) Describe() string {
	return fmt.Sprintf("GPU %d (%s, %04x:%04x)", g.Index, g.Address, g.ID.Vendor, g.ID.Device)
}

// TypeInfo is a vGPU type a GPU can host.
type TypeInfo struct {
	Name   string // short name, A10-4Q
	ID     string // mdev type folder (nvidia-558) or vendor type id (1155); "" when not known yet
	SizeGB int
	// Max is how many vGPUs of this type the GPU holds alone, 0 when
	// unknown; MaxFrom says where the number comes from: "mdev description"
	// (max_instance=N), "available_instances" (free plus existing, when the
	// description lacks it), "catalog" (framebuffer / size from NVIDIA's
	// documentation, at most 32), each capped by "VFs" on SR-IOV GPUs.
	Max     int
	MaxFrom string
}

// VGPU is one existing vGPU.
type VGPU struct {
	ID     string       // mdev UUID, or the VF address for vendor-specific VFIO
	Type   string       // short type name, "" when it cannot be named
	TypeID string       // nvidia-558, or the vendor type id
	Parent host.Address // the mdev parent (GPU or VF), or the VF
}

// TypeNamer names the vGPU type ids a GPU supports (TypeMemory: what the
// manager saw the driver list; NVML's supported vGPU types). Vendor-specific
// VFIO shows a VF's type only as an id, and creatable_vgpu_types lists
// names only for what can be created now: on a full card, no list names
// the ids in use, and on a used card the types of other sizes are missing.
// No table of ids is kept: a TypeNamer names the rest, or nobody does. It
// is asked once per vendor-VFIO GPU and inventory, so it should cache; a
// TypeNamer that also learns (TypeMemory) is taught every name the driver
// lists.
type TypeNamer interface {
	TypeNames(gpu host.Address) (map[int]string, error)
}

// TypeNamesFunc adapts a function to TypeNamer.
type TypeNamesFunc func(gpu host.Address) (map[int]string, error)

// TypeNames calls f.
func (f TypeNamesFunc) TypeNames(gpu host.Address) (map[int]string, error) { return f(gpu) }

// Parent is an mdev or SR-IOV parent that is no NVIDIA GPU, taken as one
// (Options.Parents).
type Parent struct {
	// Name is its PCI address, or its name under /sys/class/mdev_bus (the
	// kernel's mtty sample driver is no PCI function).
	Name host.Address
	// Types names its mdev types (its VFs' too), by type id, as the vGPU
	// types they stand for ("mtty-2": "A10-2Q"); a type it leaves out is not
	// offered, and an mdev of such a type is a vGPU nobody names. nil: the
	// last word of each type's name, as for NVIDIA's.
	Types map[string]string
}

// Inventory reads every NVIDIA GPU's vGPU state; names may be nil. It
// changes nothing.
func Inventory(h HostView, names TypeNamer) ([]*GPU, error) {
	return inventory(h, Options{TypeNames: names})
}

// inventory reads the NVIDIA GPUs, then o.Parents, in order.
func inventory(h HostView, o Options) ([]*GPU, error) {
	names := o.TypeNames
	snap, err := h.Scan()
	if err != nil {
		return nil, err
	}
	mdevs, err := h.Mdevs()
	if err != nil {
		return nil, err
	}
	var gpus []*GPU
	for _, f := range snap.Functions {
		if f.Vendor != host.VendorNVIDIA || f.Role != host.RoleGPU || f.PhysFn != "" {
			continue
		}
		g := &GPU{Index: len(gpus), Address: f.Address, ID: vgpuconfig.DeviceID{Device: f.Device, Vendor: f.Vendor}, TotalVFs: f.SRIOVTotalVFs, VFs: f.VirtFns}
		if err := readGPU(h, g, mdevs, names); err != nil {
			return nil, fmt.Errorf("%s: %w", g.Describe(), err)
		}
		gpus = append(gpus, g)
	}
	for _, p := range o.Parents {
		g := &GPU{Index: len(gpus), Address: p.Name, mdevNames: p.Types}
		if f, ok := snap.Function(p.Name); ok {
			g.ID, g.TotalVFs, g.VFs = vgpuconfig.DeviceID{Device: f.Device, Vendor: f.Vendor}, f.SRIOVTotalVFs, f.VirtFns
		}
		if err := readGPU(h, g, mdevs, names); err != nil {
			return nil, fmt.Errorf("%s: %w", g.Describe(), err)
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// readGPU decides the backend and reads types and vGPUs.
func readGPU(h HostView, g *GPU, mdevs []host.Mdev, namer TypeNamer) error {
	pfTypes, err := h.MdevTypes(g.Address)
	if err != nil {
		return err
	}
	switch {
	case len(pfTypes) > 0:
		g.Backend = BackendMdev
		return readMdevGPU(g, map[host.Address][]host.MdevType{g.Address: pfTypes}, mdevs)
	case g.TotalVFs > 0 && len(g.VFs) == 0:
		g.Backend = BackendSRIOV
		for _, t := range catalogTypes(g.ID.Device) {
			t.Max, t.MaxFrom = capByVFs(t.Max, t.MaxFrom, g.TotalVFs)
			g.Types = append(g.Types, t)
		}
		return nil
	case len(g.VFs) > 0:
		byParent := map[host.Address][]host.MdevType{}
		for _, vf := range g.VFs {
			ts, err := h.MdevTypes(vf)
			if err != nil {
				return err
			}
			if len(ts) > 0 {
				byParent[vf] = ts
			}
		}
		if len(byParent) > 0 {
			g.Backend = BackendMdevSRIOV
			return readMdevGPU(g, byParent, mdevs)
		}
		return readVendorGPU(h, g, namer)
	}
	g.Backend = BackendNone
	return nil
}

func readMdevGPU(g *GPU, byParent map[host.Address][]host.MdevType, mdevs []host.Mdev) error {
	parents := map[host.Address]bool{g.Address: true}
	for _, vf := range g.VFs {
		parents[vf] = true
	}
	count := map[string]int{}
	for _, m := range mdevs {
		parent := m.Parent
		if parent == "" {
			parent = host.Address(m.ParentName) // no PCI function: the mdev_bus name
		}
		if parents[parent] {
			v := VGPU{ID: m.UUID, Type: g.mdevTypeName(m.TypeID, m.TypeName), TypeID: m.TypeID, Parent: parent}
			g.VGPUs = append(g.VGPUs, v)
			count[v.Type]++
		}
	}
	seen := map[string]int{} // name -> index in g.Types
	for _, p := range sortedAddrs(byParent) {
		for _, mt := range byParent[p] {
			name := g.mdevTypeName(mt.ID, mt.Name)
			tn, err := vgpuconfig.ParseTypeName(name)
			if err != nil {
				continue // not a vGPU type name NVIDIA's configs could select
			}
			t := TypeInfo{Name: name, ID: mt.ID, SizeGB: tn.SizeGB, Max: mt.MaxInstances, MaxFrom: "mdev description"}
			if t.Max == 0 && g.Backend == BackendMdev {
				t.Max, t.MaxFrom = mt.Available+len(g.VGPUs), "available_instances"
			}
			if g.Backend == BackendMdevSRIOV {
				t.Max, t.MaxFrom = capByVFs(t.Max, t.MaxFrom, len(g.VFs))
			}
			if i, ok := seen[name]; ok {
				g.Types[i].Max = max(g.Types[i].Max, t.Max)
				continue
			}
			seen[name] = len(g.Types)
			g.Types = append(g.Types, t)
		}
	}
	sortTypes(g.Types)
	return nil
}

func readVendorGPU(h HostView, g *GPU, namer TypeNamer) error {
	listed := map[int]string{} // what the driver lists now, on any VF
	current := map[host.Address]int{}
	vendor := false
	for _, vf := range g.VFs {
		v, ok, err := h.VGPU(vf)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		vendor = true
		current[vf] = v.Current
		for id, name := range v.Creatable {
			listed[id] = host.ShortTypeName(name)
		}
	}
	if !vendor {
		g.Backend = BackendNone // VFs without the vGPU host driver's files
		return nil
	}
	g.Backend = BackendVendorVFIO
	names := map[int]string{}
	if l, ok := namer.(typeLearner); ok {
		l.Learn(g.Address, listed) // before any create writes one of these ids
	}
	if namer != nil {
		var more map[int]string
		var err error
		if ask, ok := namer.(idNamer); ok {
			// Only what neither the lists nor the memory name sends it
			// to its fallback (NVML).
			var need []int
			for _, id := range current {
				if _, ok := listed[id]; !ok && id != 0 {
					need = append(need, id)
				}
			}
			more, err = ask.TypeNamesFor(g.Address, need)
		} else {
			more, err = namer.TypeNames(g.Address)
		}
		if err != nil {
			return fmt.Errorf("name its vGPU types: %w", err)
		}
		for id, name := range more {
			names[id] = host.ShortTypeName(name)
		}
	}
	maps.Copy(names, listed) // the driver's own lists win
	g.Names = names
	for _, vf := range g.VFs {
		if id := current[vf]; id != 0 {
			g.VGPUs = append(g.VGPUs, VGPU{ID: string(vf), Type: names[id], TypeID: strconv.Itoa(id), Parent: vf})
		}
	}
	seen := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(names)) {
		name := names[id]
		tn, err := vgpuconfig.ParseTypeName(name)
		if err != nil || seen[name] {
			continue
		}
		seen[name] = true
		t := TypeInfo{Name: name, ID: strconv.Itoa(id), SizeGB: tn.SizeGB, Max: vgpuconfig.CatalogMax(g.ID.Device, name), MaxFrom: "catalog"}
		t.Max, t.MaxFrom = capByVFs(t.Max, t.MaxFrom, len(g.VFs))
		g.Types = append(g.Types, t)
	}
	// Types no list names now (another size in use), for planning only:
	// their id is read from creatable_vgpu_types when created.
	for _, t := range catalogTypes(g.ID.Device) {
		if !seen[t.Name] {
			seen[t.Name] = true
			t.Max, t.MaxFrom = capByVFs(t.Max, t.MaxFrom, len(g.VFs))
			g.Types = append(g.Types, t)
		}
	}
	sortTypes(g.Types)
	return nil
}

// mdevTypeName is the short vGPU type name of an mdev type: the last word
// of its name, or what Parent.Types says for a parent that is no NVIDIA GPU.
func (g *GPU) mdevTypeName(id, name string) string {
	if g.mdevNames != nil {
		return g.mdevNames[id]
	}
	return host.ShortTypeName(name)
}

// capByVFs caps a capacity at the VF count (one vGPU per VF); an unknown
// capacity becomes the VF count.
func capByVFs(n int, from string, vfs int) (int, string) {
	if n == 0 || n > vfs {
		return vfs, "VFs"
	}
	return n, from
}

func sortTypes(ts []TypeInfo) {
	sort.Slice(ts, func(i, j int) bool { return vgpuconfig.TypeLess(ts[i].Name, ts[j].Name) })
}

func sortedAddrs[V any](m map[host.Address]V) []host.Address {
	out := make([]host.Address, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// typeInfo finds a type the GPU can host by short name.
func (g *GPU) typeInfo(name string) (TypeInfo, bool) {
	for _, t := range g.Types {
		if t.Name == name {
			return t, true
		}
	}
	return TypeInfo{}, false
}

// typeNames lists the short names the GPU can host.
func (g *GPU) typeNames() []string {
	out := make([]string, 0, len(g.Types))
	for _, t := range g.Types {
		out = append(out, t.Name)
	}
	return out
}

// counts is the GPU's vGPUs by type ("" for unnamed ones).
func (g *GPU) counts() map[string]int {
	out := map[string]int{}
	for _, v := range g.VGPUs {
		out[v.Type]++
	}
	return out
}

// catalogTypes are the catalog's types of a device id (vgpuconfig.Catalog),
// their capacity from the catalog, never an id (the driver numbers them).
func catalogTypes(device uint16) []TypeInfo {
	var out []TypeInfo
	for _, t := range vgpuconfig.Catalog(device) {
		out = append(out, TypeInfo{Name: t.Name, SizeGB: t.SizeGB, Max: t.Max, MaxFrom: "catalog"})
	}
	return out
}
