// Package kata is the Kata Containers sandbox device plugin: passthrough
// GPUs as nvidia.com/pgpu (and NVSwitches as nvidia.com/nvswitch), one
// device per IOMMU group (or iommufd vfioN), each also a CDI device
// "nvidia.com/pgpu=<id>" in a spec kept in the CDI folder.
package kata

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/gpuname"
)

// Default resource names.
const (
	DefaultResource         = "nvidia.com/pgpu"
	DefaultNVSwitchResource = "nvidia.com/nvswitch"
)

// Scanner discovers Kata resources on the host.
type Scanner struct {
	Host             HostView
	Resource         string         // GPUs; default nvidia.com/pgpu
	NVSwitchResource string         // NVSwitches; default nvidia.com/nvswitch
	Namer            *gpuname.Namer // set for per-model names (nvidia.com/<MODEL>)
	// NodeDev is the node's /dev as the container runtime sees it
	// (deviceplugin.DefaultNodeDev when empty).
	NodeDev string
	// ContainerGPUs, when set, names the GPUs a mixed node keeps on their
	// host driver for containers (the VFIO manager's split): those are
	// where they belong, not a preflight problem.
	ContainerGPUs func() map[host.Address]bool

	mu        sync.Mutex
	preflight Preflight
}

// Preflight is what the plugin checks about the node on every scan.
type Preflight struct {
	IOMMU bool `json:"iommu"`
	// HostBoundGPUs are NVIDIA GPUs still on a host driver: not advertised.
	HostBoundGPUs []string `json:"hostBoundGPUs"`
	// ContainerGPUs are the GPUs a mixed node keeps for containers, on
	// their host driver by design (not advertised, not a problem).
	ContainerGPUs []string `json:"containerGPUs,omitempty"`
}

// Problems lists what a platform engineer should fix.
func (p Preflight) Problems() []string {
	var out []string
	if !p.IOMMU {
		out = append(out, "the IOMMU is not enabled: no GPU can be passed through")
	}
	for _, a := range p.HostBoundGPUs {
		out = append(out, fmt.Sprintf("GPU %s is bound to a host driver, not vfio: not advertised", a))
	}
	return out
}

// LastPreflight returns the checks of the last scan.
func (s *Scanner) LastPreflight() Preflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.preflight
}

// Scan implements deviceplugin.Scanner.
func (s *Scanner) Scan(context.Context) ([]deviceplugin.Resource, error) {
	snap, err := s.Host.Scan()
	if err != nil {
		return nil, err
	}
	iommufd := s.Host.IOMMUFD()
	pf := Preflight{IOMMU: snap.IOMMU.Enabled, HostBoundGPUs: []string{}}
	var containers map[host.Address]bool
	if s.ContainerGPUs != nil {
		containers = s.ContainerGPUs()
	}
	byRes := map[string]*deviceplugin.Resource{}
	seen := map[string]bool{}
	for _, f := range snap.Functions {
		if f.Vendor != host.VendorNVIDIA || f.PhysFn != "" {
			continue
		}
		if f.Role == host.RoleGPU && f.Driver != "" && !host.IsVFIODriver(f.Driver) {
			if containers[f.Address] {
				pf.ContainerGPUs = append(pf.ContainerGPUs, string(f.Address))
			} else {
				pf.HostBoundGPUs = append(pf.HostBoundGPUs, string(f.Address))
			}
		}
		if !host.IsVFIODriver(f.Driver) || f.IOMMUGroup == host.NoGroup {
			continue
		}
		name := s.resourceFor(f)
		if name == "" {
			continue
		}
		// One device per IOMMU group: the group is passed whole, with the
		// iommufd cdevs of every member (GPU and companions).
		groupKey := name + "/" + strconv.Itoa(f.IOMMUGroup)
		if seen[groupKey] {
			continue
		}
		seen[groupKey] = true
		id := strconv.Itoa(f.IOMMUGroup)
		var cdevs []string
		for _, m := range snap.GroupMembers(f) {
			if host.IsVFIODriver(m.Driver) {
				cdevs = append(cdevs, m.VFIODevices...)
			}
		}
		if iommufd && len(f.VFIODevices) > 0 {
			id = f.VFIODevices[0]
		}
		r, ok := byRes[name]
		if !ok {
			r = &deviceplugin.Resource{Name: name, Allocate: cdiAllocator, WaitsForVFIO: true} // passthrough only
			byRes[name] = r
		}
		addr, group := f.Address, f.IOMMUGroup
		r.Devices = append(r.Devices, deviceplugin.Device{
			ID: id, NUMA: f.NUMANode, Values: []string{name + "=" + id},
			Specs: deviceplugin.VFIOSpecs(s.NodeDev, group, cdevs, iommufd),
			Check: func() error { return s.Host.StillOnVFIO(addr, group) },
		})
	}
	s.mu.Lock()
	s.preflight = pf
	s.mu.Unlock()
	names := make([]string, 0, len(byRes))
	for n := range byRes {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]deviceplugin.Resource, 0, len(names))
	for _, n := range names {
		out = append(out, *byRes[n])
	}
	return out, nil
}

func (s *Scanner) resourceFor(f *host.Function) string {
	switch f.Role {
	case host.RoleGPU:
		if s.Namer != nil {
			name, _ := s.Namer.Name(f.Vendor, f.Device)
			return "nvidia.com/" + name
		}
		if s.Resource != "" {
			return s.Resource
		}
		return DefaultResource
	case host.RoleNVSwitch:
		if s.NVSwitchResource != "" {
			return s.NVSwitchResource
		}
		return DefaultNVSwitchResource
	}
	return ""
}

// cdiAllocator answers Allocate with the CDI device names (the device
// specs are added by the framework).
func cdiAllocator(devs []deviceplugin.Device) *pluginapi.ContainerAllocateResponse {
	resp := &pluginapi.ContainerAllocateResponse{}
	for _, d := range devs {
		for _, v := range d.Values {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: v})
		}
	}
	return resp
}
