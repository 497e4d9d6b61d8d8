package gpucdi

import (
	"errors"
	"fmt"
	"strconv"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// AllDevice is the name of the device that holds every GPU and MIG device.
const AllDevice = "all"

type controlNode struct {
	name, driver string // driver: the <proc>/devices name giving the major
	major, minor int64
	// always: emitted when the host has GPUs, node or not; else when the
	// node exists or <proc>/devices lists driver.
	always bool
}

// controlNodes are the nodes every GPU container gets. nvidia-uvm's nodes
// are made lazily (by nvidia-modprobe, on first CUDA use on the host), so
// the module being loaded is enough; nvidia-modeset is optional and only
// passed on when the node exists.
func controlNodes() []controlNode {
	return []controlNode{
		{name: "nvidiactl", major: nvidiaMajor, minor: 255, always: true},
		{name: "nvidia-uvm", driver: "nvidia-uvm", minor: 0},
		{name: "nvidia-uvm-tools", driver: "nvidia-uvm", minor: 1},
		{name: "nvidia-modeset", major: nvidiaMajor, minor: 254},
	}
}

// Build makes the CDI spec of an inventory, reading the host's /dev and
// /proc through the host model over o's roots and the driver's files under
// o.DriverRoot. The spec passes Validate and has the lowest cdiVersion its
// content allows.
func Build(inv Inventory, o Options) (*cdispec.Spec, error) {
	o = o.withDefaults()
	return build(inv, o, hostModel(o))
}

func build(inv Inventory, o Options, h hostDevices) (*cdispec.Spec, error) {
	majors, err := h.CharMajors()
	if err != nil {
		return nil, err
	}
	caps, err := h.MIGCaps()
	if err != nil {
		return nil, err
	}
	spec := &cdispec.Spec{Kind: o.Kind}
	var all []*cdispec.DeviceNode
	add := func(names []string, nodes ...*cdispec.DeviceNode) {
		for _, name := range names {
			spec.Devices = append(spec.Devices, cdispec.Device{
				Name:           name,
				ContainerEdits: cdispec.ContainerEdits{DeviceNodes: nodes},
			})
		}
		for _, n := range nodes {
			if !containsNode(all, n.Path) {
				all = append(all, n)
			}
		}
	}
	for _, g := range inv.GPUs {
		gpuNode, err := devNode(h, "nvidia"+strconv.Itoa(g.Minor), nvidiaMajor, int64(g.Minor))
		if err != nil {
			return nil, err
		}
		add(names(strconv.Itoa(g.Index), g.UUID), gpuNode)
		for _, m := range g.MIG {
			nodes := []*cdispec.DeviceNode{gpuNode}
			for _, id := range []string{
				fmt.Sprintf("gpu%d/gi%d/access", g.Minor, m.GI),
				fmt.Sprintf("gpu%d/gi%d/ci%d/access", g.Minor, m.GI, m.CI),
			} {
				minor, err := caps.Minor(id)
				if err != nil {
					return nil, fmt.Errorf("MIG device %d:%d (%s): %w", g.Index, m.Index, m.UUID, err)
				}
				n, err := devNode(h, "nvidia-caps/nvidia-cap"+strconv.FormatInt(minor, 10), majors["nvidia-caps"], minor)
				if err != nil {
					return nil, err
				}
				nodes = append(nodes, n)
			}
			add(names(fmt.Sprintf("%d:%d", g.Index, m.Index), m.UUID), nodes...)
		}
	}
	if len(inv.GPUs) > 0 {
		add([]string{AllDevice}, all...)
	}

	for _, c := range controlNodes() {
		if len(inv.GPUs) == 0 {
			break
		}
		major, listed := c.major, false
		if c.driver != "" {
			major, listed = majors[c.driver]
		}
		d, err := h.DevNode(c.name)
		if err != nil {
			return nil, fmt.Errorf("CDI device node /dev/%s: %w", c.name, err)
		}
		if !c.always && !listed && !d.Exists {
			continue
		}
		spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes, nodeOf(d, c.name, major, c.minor))
	}
	mounts, err := driverRoot(o.DriverRoot).files(inv.DriverVersion, o.LibDirs, o.BinDirs)
	if err != nil {
		return nil, err
	}
	spec.ContainerEdits.Mounts = mounts
	spec.ContainerEdits.Env = []string{"NVIDIA_VISIBLE_DEVICES=void"}

	if err := Validate(spec); err != nil {
		return nil, err
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec of %s: %w", spec.Kind, err)
	}
	spec.Version = v
	return spec, nil
}

// names is a device's name and, when it is a valid CDI device name (a MIG
// UUID of drivers before R470 is not: MIG-GPU-<uuid>/<gi>/<ci>), its UUID.
func names(name, uuid string) []string {
	if uuid == "" || parser.ValidateDeviceName(uuid) != nil {
		return []string{name}
	}
	return []string{name, uuid}
}

func containsNode(nodes []*cdispec.DeviceNode, p string) bool {
	for _, n := range nodes {
		if n.Path == p {
			return true
		}
	}
	return false
}

// Validate checks a spec with the CDI library's rules: kind, device names
// (unique, valid), container edits (non-empty for devices), and that the
// cdiVersion, when set, is known and allows the content.
func Validate(spec *cdispec.Spec) error {
	if spec == nil {
		return errors.New("CDI spec: nil")
	}
	vendor, class := parser.ParseQualifier(spec.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return fmt.Errorf("CDI spec of %q: %w", spec.Kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return fmt.Errorf("CDI spec of %q: %w", spec.Kind, err)
	}
	if spec.Version != "" {
		if err := cdispec.ValidateVersion(spec); err != nil {
			return fmt.Errorf("CDI spec of %s: %w", spec.Kind, err)
		}
	}
	if err := (&cdi.ContainerEdits{ContainerEdits: &spec.ContainerEdits}).Validate(); err != nil {
		return fmt.Errorf("CDI spec of %s: %w", spec.Kind, err)
	}
	if len(spec.Devices) == 0 {
		return fmt.Errorf("CDI spec of %s: no devices", spec.Kind)
	}
	seen := map[string]bool{}
	for i := range spec.Devices {
		d := &spec.Devices[i]
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return fmt.Errorf("CDI spec of %s: %w", spec.Kind, err)
		}
		if seen[d.Name] {
			return fmt.Errorf("CDI spec of %s: device %q twice", spec.Kind, d.Name)
		}
		seen[d.Name] = true
		e := d.ContainerEdits
		if len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.Mounts) == 0 && len(e.Hooks) == 0 && len(e.NetDevices) == 0 {
			return fmt.Errorf("CDI spec of %s: device %q has no edits", spec.Kind, d.Name)
		}
		if err := (&cdi.ContainerEdits{ContainerEdits: &e}).Validate(); err != nil {
			return fmt.Errorf("CDI spec of %s: device %q: %w", spec.Kind, d.Name, err)
		}
	}
	return nil
}
