// Package gpuname gives GPU models their extended-resource names: the GPU
// Operator's kubevirt-gpu-device-plugin rule over pci.ids text, pinned by
// a curated table for data-centre GPUs, with per-cluster overrides.
package gpuname

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

var (
	// Whitespace matches runs of white space.
	Whitespace = regexp.MustCompile(`\s+`)
	notAllowed = regexp.MustCompile(`[^A-Z0-9_]`)
)

// NVIDIA is NVIDIA's PCI vendor id, the vendor the plugins serve.
const NVIDIA = 0x10de

// DeriveName turns a pci.ids device name into a resource name the way the
// GPU Operator's kubevirt-gpu-device-plugin does: upper case; "/" and "."
// to "_"; each run of white space to "_"; anything else outside
// [A-Z0-9_] dropped. "GA102GL [A10]" gives "GA102GL_A10".
func DeriveName(pciName string) string {
	n := strings.ToUpper(pciName)
	n = strings.ReplaceAll(n, "/", "_")
	n = strings.ReplaceAll(n, ".", "_")
	n = Whitespace.ReplaceAllString(n, "_")
	return notAllowed.ReplaceAllString(n, "")
}

// curated pins the pci.ids text of data-centre GPUs (and NVSwitches), so a
// model gets the same resource name whatever pci.ids a node carries. The
// text is the current pci.ids spelling; older lists differ (2330 lacks the
// space before "[", 2321 has no product, 2335 and 26b9 are absent).
var curated = map[uint16]string{
	0x2236: "GA102GL [A10]",
	0x2235: "GA102GL [A40]",
	0x20b7: "GA100GL [A30 PCIe]",
	0x20f1: "GA100 [A100 PCIe 40GB]",
	0x20b5: "GA100 [A100 PCIe 80GB]",
	0x20b0: "GA100 [A100 SXM4 40GB]",
	0x20b2: "GA100 [A100 SXM4 80GB]",
	0x1af1: "GA100 [A100 NVSwitch]",
	0x2330: "GH100 [H100 SXM5 80GB]",
	0x2331: "GH100 [H100 PCIe]",
	0x2321: "GH100 [H100 NVL]",
	0x2322: "GH100 [H800 PCIe]",
	0x2324: "GH100 [H800]",
	0x2335: "GH100 [H200 SXM 141GB]",
	0x2342: "GH100 [GH200 120GB / 480GB]",
	0x22a3: "GH100 [H100 NVSwitch]",
	0x25b6: "GA107GL [A2 / A16]",
	0x26b5: "AD102GL [L40]",
	0x26b9: "AD102GL [L40S]",
	0x27b8: "AD104GL [L4]",
	0x1eb8: "TU104GL [Tesla T4]",
	0x1db4: "GV100GL [Tesla V100 PCIe 16GB]",
	0x1db5: "GV100GL [Tesla V100 SXM2 32GB]",
}

// Namer gives each GPU model its resource name: an override from the
// config, else the curated table, else the host's pci.ids, else the ids.
type Namer struct {
	overrides map[uint32]string
	pciNames  map[uint32]string // device names of the served vendors in pci.ids
}

func key(vendor, device uint16) uint32 { return uint32(vendor)<<16 | uint32(device) }

// NewNamer reads pci.ids (the given file, or the first of SystemPCIIDs
// when path is empty; none there is not an error) keeping the device names
// of vendors (NVIDIA's when none are given), and an optional overrides
// file: YAML or JSON mapping "10de:2236" to a name. A file that does not
// parse is an error naming it (and the line or key).
func NewNamer(pciIDs, overridesFile string, vendors ...uint16) (*Namer, error) {
	if len(vendors) == 0 {
		vendors = []uint16{NVIDIA}
	}
	n := &Namer{overrides: map[uint32]string{}}
	path := pciIDs
	if path == "" {
		for _, p := range SystemPCIIDs() {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
	}
	if path != "" {
		names, err := ReadPCIIDs(path, vendors)
		if err != nil {
			return nil, err
		}
		n.pciNames = names
	}
	if overridesFile == "" {
		return n, nil
	}
	b, err := os.ReadFile(overridesFile)
	if err != nil {
		return nil, fmt.Errorf("name overrides %s: %w", overridesFile, err)
	}
	m, err := ParseOverrides(b)
	if err != nil {
		return nil, fmt.Errorf("name overrides %s: %w", overridesFile, err)
	}
	n.overrides = m
	return n, nil
}

// Name returns the resource name (without "nvidia.com/") of a model and
// where it came from (override, curated, pci.ids, ids).
func (n *Namer) Name(vendor, device uint16) (string, string) {
	if name, ok := n.overrides[key(vendor, device)]; ok {
		return name, "override"
	}
	if text, ok := curated[device]; ok && vendor == 0x10de {
		return DeriveName(text), "curated"
	}
	if text, ok := n.pciNames[key(vendor, device)]; ok {
		// The rule can give what the kubelet refuses (over 63 characters,
		// a trailing "_" from "[RTX A1000 Embedded GPU ]"): those get ids.
		if name := DeriveName(text); ValidResourceName(name) == nil {
			return name, "pci.ids"
		}
	}
	return fmt.Sprintf("PCI_%04X_%04X", vendor, device), "ids"
}

// CuratedDevice returns the NVIDIA device id whose curated name is name
// (the inverse of the table), so a resource name can be turned back into a
// KubeVirt pciVendorSelector.
func CuratedDevice(name string) (uint16, bool) {
	for id, text := range curated {
		if DeriveName(text) == name {
			return id, true
		}
	}
	return 0, false
}
