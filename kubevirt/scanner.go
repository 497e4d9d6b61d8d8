// Package kubevirt is the KubeVirt sandbox device plugin: passthrough GPUs
// as nvidia.com/<MODEL> with PCI_RESOURCE_* env, mdev vGPUs as
// nvidia.com/<TYPE> with MDEV_PCI_RESOURCE_* env, vendor-specific VFIO vGPU
// VFs as PCI resources, and the KubeVirt permittedHostDevices entries for
// all of them. Discovery comes from the host model.
package kubevirt

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	v1 "kubevirt.io/api/core/v1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/gpuname"
)

// ResourcePrefix is the domain of every resource this plugin advertises.
const ResourcePrefix = "nvidia.com/"

// EnvName is KubeVirt's env variable for a resource: prefix, "_", the
// resource upper-cased with "/" and "." as "_"
// (PCI_RESOURCE_NVIDIA_COM_GA102GL_A10).
func EnvName(prefix, resource string) string {
	n := strings.ToUpper(resource)
	n = strings.ReplaceAll(n, "/", "_")
	n = strings.ReplaceAll(n, ".", "_")
	return prefix + "_" + n
}

// TypeResource is the resource name of a vGPU type name: "NVIDIA A10-4Q"
// gives nvidia.com/NVIDIA_A10-4Q.
func TypeResource(typeName string) string {
	return ResourcePrefix + gpuname.Whitespace.ReplaceAllString(strings.TrimSpace(typeName), "_")
}

// Scanner discovers KubeVirt resources on the host.
type Scanner struct {
	Host  HostView
	Namer *Namer
	// VGPU is where the vGPU device manager says what it is doing; zero
	// when it runs on no node of ours.
	VGPU VGPUState
	// NodeDev is the node's /dev as the container runtime sees it
	// (deviceplugin.DefaultNodeDev when empty).
	NodeDev string
	// Log says which vGPU is left unadvertised because nobody names its
	// type (once per VF and type id).
	Log logr.Logger

	mu        sync.Mutex
	permitted v1.PermittedHostDevices
	unnamed   map[string]bool // "VF id" logged as unnamed
}

type building struct {
	res      deviceplugin.Resource
	pci      *v1.PciHostDevice
	mediated *v1.MediatedHostDevice
}

// Scan implements deviceplugin.Scanner.
func (s *Scanner) Scan(context.Context) ([]deviceplugin.Resource, error) {
	snap, err := s.Host.Scan()
	if err != nil {
		return nil, err
	}
	iommufd := s.Host.IOMMUFD()
	out := map[string]*building{}
	add := func(name string, d deviceplugin.Device, env string) *building {
		b, ok := out[name]
		if !ok {
			b = &building{res: deviceplugin.Resource{Name: name, Allocate: envAllocator(EnvName(env, name))}}
			out[name] = b
		}
		b.res.Devices = append(b.res.Devices, d)
		return b
	}
	// While the vGPU device manager changes vGPUs, none is advertised: the
	// kubelet must never see (and hand out) a half-built set. Passthrough
	// GPUs are not its business and stay.
	paused := s.VGPU.Paused()
	typeNames := vgpuTypeNames(s.Host, snap)
	for id, name := range s.VGPU.TypeNames() {
		if _, ok := typeNames[id]; !ok {
			typeNames[id] = name
		}
	}
	for _, f := range snap.Functions {
		if f.Vendor != host.VendorNVIDIA || f.Role != host.RoleGPU || f.IOMMUGroup == host.NoGroup {
			continue
		}
		addr, group := f.Address, f.IOMMUGroup
		dev := deviceplugin.Device{ID: string(addr), NUMA: f.NUMANode, Values: []string{string(addr)},
			Specs: deviceplugin.VFIOSpecs(s.NodeDev, group, f.VFIODevices, iommufd)}
		switch {
		case f.PhysFn == "" && host.IsVFIODriver(f.Driver):
			name, _ := s.Namer.Name(f.Vendor, f.Device)
			dev.Check = func() error { return s.Host.StillOnVFIO(addr, group) }
			b := add(ResourcePrefix+name, dev, "PCI_RESOURCE")
			b.res.WaitsForVFIO = true // bound by the VFIO manager
			b.pci = &v1.PciHostDevice{PCIVendorSelector: fmt.Sprintf("%04X:%04X", f.Vendor, f.Device), ResourceName: b.res.Name, ExternalResourceProvider: true}
		case f.PhysFn != "" && !paused:
			vg, ok, err := s.Host.VGPU(addr)
			if err != nil {
				return nil, err
			}
			if !ok || vg.Current == 0 {
				continue
			}
			current := vg.Current
			typeName := typeNames[current]
			if typeName == "" {
				// No list names the id and the manager's report does not
				// either: a resource named after the id would be a guess
				// no VM asks for, so the vGPU is not advertised.
				s.logUnnamed(addr, current)
				continue
			}
			dev.Check = func() error {
				v, ok, err := s.Host.VGPU(addr)
				if err != nil || !ok || v.Current != current {
					return fmt.Errorf("VF %s no longer has vGPU type %d", addr, current)
				}
				return nil
			}
			b := add(TypeResource(typeName), dev, "PCI_RESOURCE")
			b.pci = &v1.PciHostDevice{PCIVendorSelector: fmt.Sprintf("%04X:%04X", f.Vendor, f.Device), ResourceName: b.res.Name, ExternalResourceProvider: true}
		}
	}
	if paused {
		return s.finish(out), nil
	}
	mdevs, err := s.Host.Mdevs()
	if err != nil {
		return nil, err
	}
	for _, m := range mdevs {
		parent, ok := snap.Function(m.Parent)
		if !ok || parent.Vendor != host.VendorNVIDIA || m.TypeName == "" || m.IOMMUGroup == host.NoGroup {
			continue
		}
		uuid, group := m.UUID, m.IOMMUGroup
		dev := deviceplugin.Device{ID: uuid, NUMA: parent.NUMANode, Values: []string{uuid},
			Specs: deviceplugin.VFIOSpecs(s.NodeDev, group, nil, false),
			Check: func() error { return s.Host.StillMdev(uuid, group) }}
		b := add(TypeResource(m.TypeName), dev, "MDEV_PCI_RESOURCE")
		b.mediated = &v1.MediatedHostDevice{MDEVNameSelector: m.TypeName, ResourceName: b.res.Name, ExternalResourceProvider: true}
	}
	return s.finish(out), nil
}

// logUnnamed logs, once per VF and type id, a vGPU left unadvertised.
func (s *Scanner) logUnnamed(vf host.Address, id int) {
	key := fmt.Sprintf("%s %d", vf, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unnamed[key] {
		return
	}
	if s.unnamed == nil {
		s.unnamed = map[string]bool{}
	}
	s.unnamed[key] = true
	s.Log.Info("vGPU not advertised: nobody names its type id (not in any creatable_vgpu_types, nor in the vGPU device manager's report)", "vf", vf, "typeId", id)
}

func (s *Scanner) finish(out map[string]*building) []deviceplugin.Resource {
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	var res []deviceplugin.Resource
	permitted := v1.PermittedHostDevices{}
	for _, n := range names {
		b := out[n]
		res = append(res, b.res)
		if b.pci != nil {
			permitted.PciHostDevices = append(permitted.PciHostDevices, *b.pci)
		}
		if b.mediated != nil {
			permitted.MediatedDevices = append(permitted.MediatedDevices, *b.mediated)
		}
	}
	s.mu.Lock()
	s.permitted = permitted
	s.mu.Unlock()
	return res
}

// Permitted returns the KubeVirt permittedHostDevices entries for what the
// last scan found.
func (s *Scanner) Permitted() v1.PermittedHostDevices {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.permitted.DeepCopy()
}

// PermittedFor is Permitted limited to the given resources (those being
// advertised: passthrough waits for the VFIO manager).
func (s *Scanner) PermittedFor(res []deviceplugin.Resource) v1.PermittedHostDevices {
	names := map[string]bool{}
	for _, r := range res {
		names[r.Name] = true
	}
	all := s.Permitted()
	out := v1.PermittedHostDevices{}
	for _, e := range all.PciHostDevices {
		if names[e.ResourceName] {
			out.PciHostDevices = append(out.PciHostDevices, e)
		}
	}
	for _, e := range all.MediatedDevices {
		if names[e.ResourceName] {
			out.MediatedDevices = append(out.MediatedDevices, e)
		}
	}
	return out
}

// envAllocator puts the comma-separated values of the allocated devices in
// one env variable, in a new response every call.
func envAllocator(env string) func([]deviceplugin.Device) *pluginapi.ContainerAllocateResponse {
	return func(devs []deviceplugin.Device) *pluginapi.ContainerAllocateResponse {
		vals := make([]string, 0, len(devs))
		for _, d := range devs {
			vals = append(vals, d.Values...)
		}
		return &pluginapi.ContainerAllocateResponse{Envs: map[string]string{env: strings.Join(vals, ",")}}
	}
}

// vgpuTypeNames maps vGPU type ids to names from every VF's creatable
// list (a VF with a type set no longer lists it; its siblings do), as
// "NVIDIA <short name>", the form the manager's report gives: a card
// whose driver writes "NVIDIA RTX Pro 6000 Blackwell DC-24Q" is named
// DC-24Q (its config's name) whether or not it still lists the type.
func vgpuTypeNames(h HostView, snap *host.Snapshot) map[int]string {
	names := map[int]string{}
	for _, f := range snap.Functions {
		if f.PhysFn == "" || f.Vendor != host.VendorNVIDIA {
			continue
		}
		if vg, ok, err := h.VGPU(f.Address); err == nil && ok {
			for id, n := range vg.Creatable {
				if short := host.ShortTypeName(n); short != "" {
					names[id] = "NVIDIA " + short
				}
			}
		}
	}
	return names
}

// Namer names GPU models (see package gpuname).
type Namer = gpuname.Namer

// NewNamer reads pci.ids and optional name overrides (see gpuname.NewNamer).
func NewNamer(pciIDs, overridesFile string) (*Namer, error) {
	return gpuname.NewNamer(pciIDs, overridesFile)
}
