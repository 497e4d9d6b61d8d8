package hostsim

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// VGPUMode is how a simulated GPU offers vGPUs.
type VGPUMode string

// vGPU modes, as NVIDIA's vGPU host driver shows them.
const (
	// MdevPF: mdev_supported_types on the GPU itself (pre-Ampere, and
	// Ampere without SR-IOV).
	MdevPF VGPUMode = "mdev"
	// MdevVF: Ampere with SR-IOV; once VFs are enabled (sriov_numvfs) each
	// VF is an mdev parent holding at most one vGPU.
	MdevVF VGPUMode = "mdev-sriov"
	// VendorVFIO: Ada, Hopper, Blackwell; VFs enabled through
	// sriov_numvfs, a vGPU per VF through nvidia/current_vgpu_type.
	VendorVFIO VGPUMode = "vendor-vfio"
)

// VGPUType is one vGPU type a simulated GPU offers.
type VGPUType struct {
	ID     int    // nvidia-<ID> mdev folder, the id in creatable_vgpu_types
	Name   string // "NVIDIA A10-4Q"
	SizeGB int    // framebuffer per vGPU
}

// VGPUCard gives a simulated GPU (a PF added with AddFunction) NVIDIA's
// vGPU host driver. The rules the simulator enforces:
//   - capacity: a type's max instances are FramebufferGB / SizeGB (the
//     max_instance of its mdev description), counted over the whole GPU
//     (PF and VFs together), and at most one vGPU per VF;
//   - equal-size mode (NVIDIA's default; MixedSize false): one
//     framebuffer size per GPU: while vGPUs exist, types of another size
//     show 0 available_instances and vanish from creatable_vgpu_types;
//   - mixed-size mode (MixedSize: what `nvidia-smi vgpu -i <gpu> -shm 1`
//     or NVML's nvmlDeviceSetVgpuHeterogeneousMode sets on a GPU with no
//     vGPU, vGPU 17 and later): sizes coexist, subject to placement. The
//     framebuffer is divided into placements aligned to each size (a
//     vGPU of S GB starts at a multiple of S GB: NVML's placement ids,
//     nvmlDeviceGetVgpuTypeCreatablePlacements, whose placementSize is
//     the slots a type occupies); the driver puts each new vGPU at the
//     lowest free placement its size fits, and a type is creatable exactly
//     while such a placement is free, so available_instances counts them
//     and creatable_vgpu_types lists the type only then (NVML API
//     reference, vGPU APIs; NVIDIA AI Enterprise "Heterogeneous vGPU");
//   - available_instances and creatable_vgpu_types shrink as vGPUs are
//     made; a VF that holds a vGPU shows 0 for every type and an empty
//     creatable list, and a full card lists nothing on any VF (NVIDIA's
//     Virtual GPU Software User Guide, vendor-specific VFIO framework:
//     creatable_vgpu_types lists the types that can be created on the VF
//     now), so no list names a type in use on a full card;
//   - the same mdev UUID twice fails with EEXIST, a type with no instance
//     left with EUSERS;
//   - sriov_numvfs changes only from 0 or to 0 (EBUSY otherwise; ERANGE
//     above sriov_totalvfs; the same value again is a no-op);
//   - current_vgpu_type: a non-zero id over an existing vGPU, or 0 over
//     none, fails with EPERM; an id not creatable now with EINVAL;
//   - removing a vGPU (mdev remove, current_vgpu_type 0, sriov_numvfs 0)
//     whose device node a process holds is recorded as a violation and
//     fails with EBUSY: the real kernel blocks the writer, unkillably,
//     until the holder lets go.
type VGPUCard struct {
	PF            string
	Mode          VGPUMode
	FramebufferGB int
	Types         []VGPUType
	TotalVFs      int // SR-IOV modes: sriov_totalvfs
	VFGroupBase   int // SR-IOV modes: VF i is alone in IOMMU group VFGroupBase+i
	// MixedSize: the GPU is in mixed-size (heterogeneous) vGPU mode;
	// false is NVIDIA's default, equal-size mode.
	MixedSize bool
}

// Max is the number of vGPUs of t the card holds alone.
func (c VGPUCard) Max(t VGPUType) int {
	if t.SizeGB <= 0 {
		return 0
	}
	n := c.FramebufferGB / t.SizeGB
	if c.Mode != MdevPF && n > c.TotalVFs {
		n = c.TotalVFs
	}
	return n
}

type simCard struct {
	card    VGPUCard
	pf      *simFunc
	vfs     []host.Address       // enabled VFs in VF order
	mdevs   map[string]simMdev   // by UUID
	current map[host.Address]int // vendor VFIO: VF -> type id
	types   map[int]VGPUType     // by id
	files   map[string]string    // attribute files as last written (refresh writes only changes)
	placed  map[string]int       // mixed-size mode: a vGPU's (mdev UUID or VF) first GB
}

type simMdev struct {
	parent host.Address
	typeID int
	group  int
	dir    string
}

// EnableVGPU gives an existing PF the vGPU host driver's sysfs (see
// VGPUCard for the rules). SR-IOV modes start with VFs disabled.
func (k *Kernel) EnableVGPU(card VGPUCard) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.enableVGPU(card)
}

// enableVGPU is EnableVGPU with k.mu held (the vGPU host driver's module
// load enables its cards: hostdrivers.go).
func (k *Kernel) enableVGPU(card VGPUCard) error {
	f, err := k.function(card.PF)
	if err != nil {
		return fmt.Errorf("vGPU card: %w", err)
	}
	c := &simCard{card: card, pf: f, mdevs: map[string]simMdev{}, current: map[host.Address]int{}, types: map[int]VGPUType{}, files: map[string]string{}, placed: map[string]int{}}
	for _, t := range card.Types {
		c.types[t.ID] = t
	}
	if k.cards == nil {
		k.cards = map[host.Address]*simCard{}
	}
	k.cards[f.addr] = c
	switch card.Mode {
	case MdevPF:
		return k.refreshCard(c)
	case MdevVF, VendorVFIO:
		for name, v := range map[string]string{"sriov_totalvfs": strconv.Itoa(card.TotalVFs), "sriov_numvfs": "0"} {
			if err := os.WriteFile(filepath.Join(f.dir, name), []byte(v+"\n"), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("vGPU card %s: unknown mode %q", card.PF, card.Mode)
}

// used counts the card's vGPUs and the framebuffer size they have.
func (c *simCard) used() (n, size int) {
	for _, m := range c.mdevs {
		n, size = n+1, c.types[m.typeID].SizeGB
	}
	for _, id := range c.current {
		if id != 0 {
			n, size = n+1, c.types[id].SizeGB
		}
	}
	return n, size
}

// available is how many more vGPUs of type t the whole card takes now.
func (c *simCard) available(t VGPUType) int {
	n, size := c.used()
	var left int
	switch {
	case c.card.MixedSize:
		left = len(c.freePlacements(t))
	case n > 0 && size != t.SizeGB:
		return 0
	default:
		left = c.card.Max(t) - n
	}
	if c.card.Mode != MdevPF {
		free := 0
		for _, vf := range c.vfs {
			if !c.vfHolds(vf) {
				free++
			}
		}
		left = min(left, free)
	}
	return max(left, 0)
}

// freePlacements are the first GBs, lowest first, of the free placements
// of t's size in mixed-size mode: multiples of the size whose whole span
// no vGPU covers.
func (c *simCard) freePlacements(t VGPUType) []int {
	if t.SizeGB <= 0 {
		return nil
	}
	var out []int
	for start := 0; start+t.SizeGB <= c.card.FramebufferGB; start += t.SizeGB {
		free := true
		for key, at := range c.placed {
			if s := c.sizeOf(key); at < start+t.SizeGB && start < at+s {
				free = false
				break
			}
		}
		if free {
			out = append(out, start)
		}
	}
	return out
}

// sizeOf is the framebuffer size of the vGPU placed under key.
func (c *simCard) sizeOf(key string) int {
	if m, ok := c.mdevs[key]; ok {
		return c.types[m.typeID].SizeGB
	}
	return c.types[c.current[host.Address(key)]].SizeGB
}

// place puts a new vGPU (key: its mdev UUID or VF) of type t at the lowest
// free placement, in mixed-size mode; the caller checked available.
func (c *simCard) place(key string, t VGPUType) {
	if !c.card.MixedSize {
		return
	}
	if free := c.freePlacements(t); len(free) > 0 {
		c.placed[key] = free[0]
	}
}

func (c *simCard) vfHolds(vf host.Address) bool {
	if c.current[vf] != 0 {
		return true
	}
	for _, m := range c.mdevs {
		if m.parent == vf {
			return true
		}
	}
	return false
}

// parents lists the mdev parents (the PF, or the enabled VFs).
func (c *simCard) parents() []host.Address {
	if c.card.Mode == MdevPF {
		return []host.Address{c.pf.addr}
	}
	return c.vfs
}

// refreshCard rewrites every available_instances and creatable_vgpu_types
// file of the card after a change.
func (k *Kernel) refreshCard(c *simCard) error {
	switch c.card.Mode {
	case MdevPF, MdevVF:
		ids := slices.Sorted(maps.Keys(c.types))
		for _, p := range c.parents() {
			f := k.funcs[p]
			for _, id := range ids {
				t := c.types[id]
				avail := c.available(t)
				if c.card.Mode == MdevVF {
					avail = min(avail, 1)
					if c.vfHolds(p) {
						avail = 0
					}
				}
				if err := k.writeMdevType(f, c, t, avail); err != nil {
					return err
				}
			}
		}
	case VendorVFIO:
		for _, vf := range c.vfs {
			creatable := map[int]string{}
			if !c.vfHolds(vf) {
				for id, t := range c.types {
					if c.available(t) > 0 {
						creatable[id] = t.Name
					}
				}
			}
			dir := filepath.Join(k.funcs[vf].dir, "nvidia")
			if err := c.write(filepath.Join(dir, "creatable_vgpu_types"), FormatVGPUTypes(creatable), 0o444); err != nil {
				return err
			}
			if err := c.write(filepath.Join(dir, "current_vgpu_type"), strconv.Itoa(c.current[vf])+"\n", 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeMdevType writes one mdev_supported_types/nvidia-<id> folder as
// NVIDIA's driver shows it.
func (k *Kernel) writeMdevType(f *simFunc, c *simCard, t VGPUType, avail int) error {
	dir := filepath.Join(f.dir, "mdev_supported_types", "nvidia-"+strconv.Itoa(t.ID))
	if _, done := c.files[dir]; done {
		return c.write(filepath.Join(dir, "available_instances"), strconv.Itoa(avail)+"\n", 0o444)
	}
	c.files[dir] = ""
	if err := os.MkdirAll(filepath.Join(dir, "devices"), 0o755); err != nil {
		return err
	}
	desc := fmt.Sprintf("num_heads=4, frl_config=60, framebuffer=%dM, max_resolution=5120x2880, max_instance=%d", t.SizeGB*1024, c.card.Max(t))
	for name, v := range map[string]string{"name": t.Name, "available_instances": strconv.Itoa(avail),
		"description": desc, "device_api": "vfio-pci"} {
		if err := c.write(filepath.Join(dir, name), v+"\n", 0o444); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "create")); err != nil {
		if err := os.WriteFile(filepath.Join(dir, "create"), nil, 0o200); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(k.sys("class", "mdev_bus"), 0o755); err != nil {
		return err
	}
	return relLink(f.dir, k.sys("class", "mdev_bus", string(f.addr)))
}

// cardOf returns the card a function belongs to (as PF or VF).
func (k *Kernel) cardOf(a host.Address) (*simCard, bool) {
	if c, ok := k.cards[a]; ok {
		return c, true
	}
	for _, c := range k.cards {
		for _, vf := range c.vfs {
			if vf == a {
				return c, true
			}
		}
	}
	return nil, false
}

// VGPUCounts reports a card's vGPUs by type name (for tests and demos).
func (k *Kernel) VGPUCounts(pf string) map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]int{}
	a, _ := host.ParseAddress(pf)
	c, ok := k.cards[a]
	if !ok {
		return out
	}
	for _, m := range c.mdevs {
		out[c.types[m.typeID].Name]++
	}
	for _, id := range c.current {
		if id != 0 {
			out[c.types[id].Name]++
		}
	}
	return out
}

// write writes an attribute file when its content changed.
func (c *simCard) write(p, content string, perm os.FileMode) error {
	if old, ok := c.files[p]; ok && old == content {
		return nil
	}
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		return err
	}
	c.files[p] = content
	return nil
}

// forget drops the cache of files under dir (a VF that went away).
func (c *simCard) forget(dir string) {
	for p := range c.files {
		if p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
			delete(c.files, p)
		}
	}
}
