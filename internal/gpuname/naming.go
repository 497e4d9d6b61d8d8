// Package gpuname gives GPU models their extended-resource names: the GPU
// Operator's kubevirt-gpu-device-plugin rule over pci.ids text, pinned by
// a curated table for data-centre GPUs, with per-cluster overrides.
package gpuname

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/jaypipes/pcidb"
	"sigs.k8s.io/yaml"
)

var (
	// Whitespace matches runs of white space.
	Whitespace = regexp.MustCompile(`\s+`)
	notAllowed = regexp.MustCompile(`[^A-Z0-9_]`)
	validName  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
)

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
	db        *pcidb.DB
}

func key(vendor, device uint16) uint32 { return uint32(vendor)<<16 | uint32(device) }

// NewNamer reads pci.ids (the given file, or the usual system locations
// when path is empty; none found is not an error there) and an optional
// overrides file: YAML or JSON mapping "10de:2236" to a name.
func NewNamer(pciIDs, overridesFile string) (*Namer, error) {
	n := &Namer{overrides: map[uint32]string{}}
	if pciIDs != "" {
		if _, err := os.Stat(pciIDs); err != nil {
			return nil, fmt.Errorf("pci.ids %s: %w", pciIDs, err)
		}
		db, err := pcidb.New(pcidb.WithPath(pciIDs), noNetwork())
		if err != nil {
			return nil, fmt.Errorf("pci.ids %s: %w", pciIDs, err)
		}
		n.db = db
	} else if db, err := pcidb.New(noNetwork()); err == nil {
		n.db = db
	}
	if overridesFile == "" {
		return n, nil
	}
	b, err := os.ReadFile(overridesFile)
	if err != nil {
		return nil, fmt.Errorf("name overrides %s: %w", overridesFile, err)
	}
	var m map[string]string
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		return nil, fmt.Errorf("name overrides %s: %w", overridesFile, err)
	}
	if err := n.SetOverrides(m); err != nil {
		return nil, fmt.Errorf("name overrides %s: %w", overridesFile, err)
	}
	return n, nil
}

// SetOverrides validates and installs overrides ("10de:2236" -> name).
func (n *Namer) SetOverrides(m map[string]string) error {
	for id, name := range m {
		v, d, ok := strings.Cut(strings.ToLower(strings.TrimSpace(id)), ":")
		vendor, err1 := parseHex16(v)
		device, err2 := parseHex16(d)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("key %q: want VENDOR:DEVICE in hex, like 10de:2236", id)
		}
		if !validName.MatchString(name) {
			return fmt.Errorf("key %q: name %q is not a valid resource name", id, name)
		}
		n.overrides[key(vendor, device)] = name
	}
	return nil
}

func parseHex16(s string) (uint16, error) {
	var v uint16
	if len(s) == 0 || len(s) > 4 {
		return 0, fmt.Errorf("bad id %q", s)
	}
	_, err := fmt.Sscanf(s, "%x", &v)
	return v, err
}

// noNetwork keeps pcidb from ever downloading pci.ids.
func noNetwork() *pcidb.WithOption {
	off := false
	return &pcidb.WithOption{EnableNetworkFetch: &off}
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
	if n.db != nil {
		if p, ok := n.db.Products[fmt.Sprintf("%04x%04x", vendor, device)]; ok && p.Name != "" {
			if name := DeriveName(p.Name); name != "" {
				return name, "pci.ids"
			}
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
