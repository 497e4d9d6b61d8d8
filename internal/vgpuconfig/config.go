package vgpuconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Version is the only config file version (NVIDIA's v1).
const Version = "v1"

// Config is a vGPU config file in NVIDIA vgpu-device-manager's format:
//
//	version: v1
//	vgpu-configs:
//	  <name>:
//	    - devices: all | [0, 1]             # GPU indexes: NVIDIA GPUs by PCI address
//	      device-filter: "0x223610DE" | [..] # optional: device id + vendor id
//	      vgpu-devices: {"A10-4Q": 3}        # type (short name) -> vGPUs per GPU
type Config struct {
	File    string
	Version string
	Configs map[string][]Entry
}

// Entry is one item of a named config: which GPUs, and the vGPUs each of
// them gets.
type Entry struct {
	AllDevices bool
	Devices    []int      // GPU indexes when not AllDevices
	Filters    []DeviceID // empty: any GPU
	VGPUs      map[string]int
	Index      int // position in the config's list
}

// DeviceID is a PCI device and vendor id as NVIDIA's configs write it:
// "0x223610DE" is device 0x2236 of vendor 0x10de.
type DeviceID struct{ Device, Vendor uint16 }

// ParseDeviceID parses "0x223610DE".
func ParseDeviceID(s string) (DeviceID, error) {
	h, ok := strings.CutPrefix(strings.ToLower(s), "0x")
	if !ok || len(h) != 8 {
		return DeviceID{}, fmt.Errorf("invalid device filter %q: want 0x<device><vendor> in hex, such as 0x223610DE", s)
	}
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return DeviceID{}, fmt.Errorf("invalid device filter %q: %w", s, err)
	}
	return DeviceID{Device: uint16(v >> 16), Vendor: uint16(v)}, nil
}

func (d DeviceID) String() string { return fmt.Sprintf("0x%04X%04X", d.Device, d.Vendor) }

// Load reads and parses a config file.
func Load(file string) (*Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, &Error{File: file, Msg: err.Error()}
	}
	return Parse(file, b)
}

// Parse parses a config strictly: an unknown key, a wrong type, a
// duplicate key, a missing required key or an unknown version is an
// Error naming the file, the config and the key.
func Parse(file string, data []byte) (*Config, error) {
	fail := func(config, key, format string, args ...any) error {
		return &Error{File: file, Config: config, Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fail("", "", "not valid YAML: %v", err)
	}
	var top map[string]json.RawMessage
	if err := decodeStrict(js, &top); err != nil || top == nil {
		return nil, fail("", "", "want a map with version and vgpu-configs")
	}
	c := &Config{File: file, Configs: map[string][]Entry{}}
	for _, k := range sortedKeys(top) {
		switch k {
		case "version":
			if err := decodeStrict(top[k], &c.Version); err != nil {
				return nil, fail("", k, "want a string")
			}
			if c.Version != Version {
				return nil, fail("", k, "unknown version %q (want %s)", c.Version, Version)
			}
		case "vgpu-configs":
			var named map[string]json.RawMessage
			if err := decodeStrict(top[k], &named); err != nil || named == nil {
				return nil, fail("", k, "want a map of config names to lists of entries")
			}
			if len(named) == 0 {
				return nil, fail("", k, "no configs")
			}
			for _, name := range sortedKeys(named) {
				entries, err := parseEntries(name, named[name])
				if err != nil {
					err.File = file
					return nil, err
				}
				c.Configs[name] = entries
			}
		default:
			return nil, fail("", k, "unknown key (want version, vgpu-configs)")
		}
	}
	switch {
	case c.Version == "":
		return nil, fail("", "version", "missing (want %s)", Version)
	case len(c.Configs) == 0:
		return nil, fail("", "vgpu-configs", "missing")
	}
	return c, nil
}

func parseEntries(name string, raw json.RawMessage) ([]Entry, *Error) {
	key := "vgpu-configs." + name
	var items []map[string]json.RawMessage
	if err := decodeStrict(raw, &items); err != nil {
		return nil, &Error{Config: name, Key: key, Msg: "want a list of entries (devices, device-filter, vgpu-devices)"}
	}
	if len(items) == 0 {
		return nil, &Error{Config: name, Key: key, Msg: "no entries"}
	}
	out := make([]Entry, 0, len(items))
	for i, item := range items {
		e, err := parseEntry(item)
		if err != nil {
			err.Config, err.Key = name, fmt.Sprintf("%s[%d]%s", key, i, err.Key)
			return nil, err
		}
		e.Index = i
		out = append(out, e)
	}
	return out, nil
}

// parseEntry parses one entry; errors carry the key relative to it.
func parseEntry(item map[string]json.RawMessage) (Entry, *Error) {
	e := Entry{}
	bad := func(key, format string, args ...any) (Entry, *Error) {
		return Entry{}, &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
	}
	if item == nil {
		return bad("", "want a map with devices, device-filter, vgpu-devices")
	}
	for _, k := range sortedKeys(item) {
		raw := item[k]
		switch k {
		case "devices":
			var all string
			if decodeStrict(raw, &all) == nil {
				if all != "all" {
					return bad(".devices", "want all or a list of GPU indexes, got %q", all)
				}
				e.AllDevices = true
				continue
			}
			if err := decodeStrict(raw, &e.Devices); err != nil || e.Devices == nil {
				return bad(".devices", "want all or a list of GPU indexes")
			}
			for _, d := range e.Devices {
				if d < 0 {
					return bad(".devices", "invalid GPU index %d", d)
				}
			}
		case "device-filter":
			var one string
			var many []string
			switch {
			case decodeStrict(raw, &one) == nil:
				many = []string{one}
			case decodeStrict(raw, &many) == nil && many != nil:
			default:
				return bad(".device-filter", "want a device id such as \"0x223610DE\" or a list of them")
			}
			for _, s := range many {
				id, err := ParseDeviceID(s)
				if err != nil {
					return bad(".device-filter", "%v", err)
				}
				e.Filters = append(e.Filters, id)
			}
		case "vgpu-devices":
			var counts map[string]json.RawMessage
			if err := decodeStrict(raw, &counts); err != nil || counts == nil {
				return bad(".vgpu-devices", "want a map of vGPU type to count, such as {\"A10-4Q\": 3}")
			}
			e.VGPUs = map[string]int{}
			for _, t := range sortedKeys(counts) {
				if _, err := ParseTypeName(t); err != nil {
					return bad(".vgpu-devices."+t, "%v", err)
				}
				var num json.Number
				err := decodeStrict(counts[t], &num)
				n, convErr := strconv.Atoi(num.String())
				if err != nil || convErr != nil || n < 0 {
					return bad(".vgpu-devices."+t, "want a count (a whole number, 0 or more), got %s", counts[t])
				}
				if n > 0 {
					e.VGPUs[t] = n
				}
			}
		default:
			return bad("."+k, "unknown key (want devices, device-filter, vgpu-devices)")
		}
	}
	switch {
	case !e.AllDevices && e.Devices == nil:
		return bad(".devices", "missing (want all or a list of GPU indexes)")
	case e.VGPUs == nil:
		return bad(".vgpu-devices", "missing (want a map of vGPU type to count)")
	}
	return e, nil
}

// Select returns the entries of a named config.
func (c *Config) Select(name string) ([]Entry, error) {
	if e, ok := c.Configs[name]; ok {
		return e, nil
	}
	have := sortedKeys(c.Configs)
	more := ""
	if len(have) > 12 {
		have, more = have[:12], fmt.Sprintf(" and %d more", len(c.Configs)-12)
	}
	return nil, &Error{File: c.File, Config: name, Key: "vgpu-configs",
		Msg: fmt.Sprintf("no config named %q (the file has %s%s)", name, strings.Join(have, ", "), more)}
}

// Matches reports whether the entry applies to GPU index i with id.
func (e Entry) Matches(i int, id DeviceID) bool {
	if len(e.Filters) > 0 && !slices.Contains(e.Filters, id) {
		return false
	}
	return e.AllDevices || slices.Contains(e.Devices, i)
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data")
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
