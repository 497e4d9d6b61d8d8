package vfio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// Desired is the state the daemon holds: functions to keep on vfio and,
// optionally, functions to return to their host drivers. Functions named
// in neither are never touched.
type Desired struct {
	// Vendor whose functions All selects (hex in a string, default 10de).
	Vendor VendorID `json:"vendor,omitempty"`
	// All selects every function of Vendor for vfio.
	All bool `json:"all,omitempty"`
	// NVSwitches includes NVSwitches in All.
	NVSwitches bool `json:"nvswitches,omitempty"`
	// Devices selects functions by PCI address for vfio.
	Devices []string `json:"devices,omitempty"`
	// Host lists functions to return to their host driver (when idle).
	Host []string `json:"host,omitempty"`
	// Release returns every function of Vendor (NVSwitches included) to
	// its host driver, when idle, and takes none for vfio: what a node
	// leaving vm-passthrough (or an uninstall) needs. It excludes All and
	// Devices.
	Release bool `json:"release,omitempty"`
	// VMGPUs splits the vendor's GPUs between VMs and containers (see
	// VMGPUs): "" or "all" is every GPU, as All; otherwise the declared
	// GPUs go to vfio and the others back to their host driver (when
	// idle). NVSwitches are then left where they are. It excludes Devices,
	// Host and Release.
	VMGPUs string `json:"vmGPUs,omitempty"`
	// Classes limit All and Release to functions of these PCI classes
	// (hex prefixes: 03, 0302, 030000); none is every class.
	Classes []string `json:"classes,omitempty"`
}

// LoadDesired reads a desired-state file (YAML or JSON).
func LoadDesired(path string) (Desired, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Desired{}, fmt.Errorf("read config %s: %w", path, err)
	}
	return ParseDesired(path, b)
}

// ParseDesired parses and validates a desired-state file's content; errors
// wrap ErrBadInput and name the file.
func ParseDesired(path string, b []byte) (Desired, error) {
	var d Desired
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		return Desired{}, fmt.Errorf("%w: config %s: %w", ErrBadInput, path, err)
	}
	if _, _, err := d.Selections(); err != nil {
		return Desired{}, fmt.Errorf("config %s: %w", path, err)
	}
	return d, nil
}

// VendorID is a PCI vendor id in the daemon's config: hex digits in a
// string ("10de", "0x10de"); zero (absent) means NVIDIA. A number is
// refused: YAML reads an unquoted 0x10de as 4318, which would select
// vendor 0x4318.
type VendorID uint16

// UnmarshalJSON accepts only a string of hex.
func (v *VendorID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '"' {
		return fmt.Errorf("vendor: %s is not a string: write the hex id in quotes, like vendor: \"10de\" (YAML reads an unquoted 0x10de as the number 4318)", b)
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("vendor: %w", err)
	}
	id, err := host.ParseID(s)
	if err != nil {
		return fmt.Errorf("vendor: %w", err)
	}
	if id == 0 || id == 0xffff {
		return fmt.Errorf("vendor: %q is not a PCI vendor id", s)
	}
	*v = VendorID(id)
	return nil
}

// MarshalJSON writes the id as four hex digits in a string.
func (v VendorID) MarshalJSON() ([]byte, error) { return json.Marshal(v.String()) }

// String is the id as four hex digits ("10de").
func (v VendorID) String() string { return fmt.Sprintf("%04x", uint16(v)) }

// Selections validates the desired state and returns the vfio and host
// selections. An address in both lists is an error.
func (d Desired) Selections() (toVFIO, toHost Selection, err error) {
	vendor := host.VendorNVIDIA
	if d.Vendor != 0 {
		vendor = uint16(d.Vendor)
	}
	classes, err := ParseClasses(d.Classes)
	if err != nil {
		return toVFIO, toHost, fmt.Errorf("classes: %w", err)
	}
	toVFIO, toHost, err = d.selections(vendor)
	toVFIO.Classes, toHost.Classes = classes, classes
	return toVFIO, toHost, err
}

func (d Desired) selections(vendor uint16) (toVFIO, toHost Selection, err error) {
	if d.Release && d.VMGPUs == "" {
		if d.All || len(d.Devices) > 0 {
			return toVFIO, toHost, fmt.Errorf("%w: release returns every function of vendor %04x to its host driver: it takes no all or devices", ErrBadInput, vendor)
		}
		return Selection{Vendor: vendor}, Selection{All: true, Vendor: vendor, NVSwitches: true}, nil
	}
	if d.VMGPUs != "" {
		if d.Release || len(d.Devices) > 0 || len(d.Host) > 0 {
			return toVFIO, toHost, fmt.Errorf("%w: vmGPUs %q splits every GPU of vendor %04x: it takes no devices, host or release", ErrBadInput, d.VMGPUs, vendor)
		}
		if _, err := ParseVMGPUs(d.VMGPUs); err != nil {
			return toVFIO, toHost, fmt.Errorf("vmGPUs: %w", err)
		}
		// The split is resolved against the host at each reconcile; until
		// then it stands for every GPU.
		return Selection{All: true, Vendor: vendor, NVSwitches: d.NVSwitches}, Selection{Vendor: vendor}, nil
	}
	toVFIO = Selection{All: d.All, Vendor: vendor, NVSwitches: d.NVSwitches}
	toHost = Selection{Vendor: vendor}
	hostSet := map[host.Address]bool{}
	for _, s := range d.Host {
		a, err := host.ParseAddress(s)
		if err != nil {
			return toVFIO, toHost, fmt.Errorf("%w: host: %w", ErrBadInput, err)
		}
		hostSet[a] = true
		toHost.Devices = append(toHost.Devices, a)
		toVFIO.Exclude = append(toVFIO.Exclude, a)
	}
	for _, s := range d.Devices {
		a, err := host.ParseAddress(s)
		if err != nil {
			return toVFIO, toHost, fmt.Errorf("%w: devices: %w", ErrBadInput, err)
		}
		if hostSet[a] {
			return toVFIO, toHost, fmt.Errorf("%w: %s is listed in both devices and host", ErrBadInput, a)
		}
		toVFIO.Devices = append(toVFIO.Devices, a)
	}
	return toVFIO, toHost, nil
}
