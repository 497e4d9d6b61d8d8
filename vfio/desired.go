package vfio

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// Desired is the state the daemon holds: functions to keep on vfio and,
// optionally, functions to return to their host drivers. Functions named
// in neither are never touched.
type Desired struct {
	// Vendor whose functions All selects (hex, default 10de).
	Vendor string `json:"vendor,omitempty"`
	// All selects every function of Vendor for vfio.
	All bool `json:"all,omitempty"`
	// NVSwitches includes NVSwitches in All.
	NVSwitches bool `json:"nvswitches,omitempty"`
	// Devices selects functions by PCI address for vfio.
	Devices []string `json:"devices,omitempty"`
	// Host lists functions to return to their host driver (when idle).
	Host []string `json:"host,omitempty"`
}

// LoadDesired reads a desired-state file (YAML or JSON).
func LoadDesired(path string) (Desired, error) {
	var d Desired
	b, err := os.ReadFile(path)
	if err != nil {
		return d, fmt.Errorf("read config %s: %w", path, err)
	}
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		return d, fmt.Errorf("%w: config %s: %v", ErrBadInput, path, err)
	}
	if _, _, err := d.Selections(); err != nil {
		return d, fmt.Errorf("config %s: %w", path, err)
	}
	return d, nil
}

// Selections validates the desired state and returns the vfio and host
// selections. An address in both lists is an error.
func (d Desired) Selections() (toVFIO, toHost Selection, err error) {
	vendor := host.VendorNVIDIA
	if d.Vendor != "" {
		if vendor, err = host.ParseID(d.Vendor); err != nil {
			return toVFIO, toHost, fmt.Errorf("%w: vendor: %v", ErrBadInput, err)
		}
	}
	toVFIO = Selection{All: d.All, Vendor: vendor, NVSwitches: d.NVSwitches}
	toHost = Selection{Vendor: vendor}
	hostSet := map[host.Address]bool{}
	for _, s := range d.Host {
		a, err := host.ParseAddress(s)
		if err != nil {
			return toVFIO, toHost, fmt.Errorf("%w: host: %v", ErrBadInput, err)
		}
		hostSet[a] = true
		toHost.Devices = append(toHost.Devices, a)
		toVFIO.Exclude = append(toVFIO.Exclude, a)
	}
	for _, s := range d.Devices {
		a, err := host.ParseAddress(s)
		if err != nil {
			return toVFIO, toHost, fmt.Errorf("%w: devices: %v", ErrBadInput, err)
		}
		if hostSet[a] {
			return toVFIO, toHost, fmt.Errorf("%w: %s is listed in both devices and host", ErrBadInput, a)
		}
		toVFIO.Devices = append(toVFIO.Devices, a)
	}
	return toVFIO, toHost, nil
}
