package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"unicode"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
)

// VGPUTypeNames is the vGPU device manager's memory of vendor-specific
// VFIO type names (names.VGPUTypesFile in its run folder): for each GPU
// (PF address), type id -> short type name ("1155" -> "L40S-24Q"), as the
// driver's creatable_vgpu_types listed them before the manager wrote. The
// driver lists only what can be created now (nothing on a VF that holds a
// vGPU, nothing on a full card), so a restarted manager names the vGPUs it
// made from this file.
type VGPUTypeNames struct {
	GPUs map[string]map[string]string `json:"gpus"`
}

// maxTypeName bounds a remembered name (a resource name's limit).
const maxTypeName = 63

// Validate checks every entry: a positive decimal id and a short type
// name of printable characters, at most 63 bytes.
func (t VGPUTypeNames) Validate() error {
	for gpu, ids := range t.GPUs {
		if gpu == "" {
			return errors.New("a GPU without an address")
		}
		for id, name := range ids {
			if n, err := strconv.Atoi(id); err != nil || n <= 0 || strconv.Itoa(n) != id {
				return fmt.Errorf("GPU %s: invalid vGPU type id %q", gpu, id)
			}
			if !ValidTypeName(name) {
				return fmt.Errorf("GPU %s: type id %s: invalid vGPU type name %q", gpu, id, name)
			}
		}
	}
	return nil
}

// ValidTypeName reports whether name can be remembered: a short type name
// ("H100-40C") of at most 63 bytes, without spaces, control characters or
// slashes.
func ValidTypeName(name string) bool {
	return name != "" && len(name) <= maxTypeName &&
		!strings.ContainsFunc(name, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) || r == '/' })
}

// WriteVGPUTypeNames replaces the memory at path with t (indented JSON),
// atomically; unchanged, it writes nothing. An invalid t is an error and
// writes nothing.
func WriteVGPUTypeNames(path string, t VGPUTypeNames) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if t.GPUs == nil {
		t.GPUs = map[string]map[string]string{}
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = atomicfile.Write(path, append(b, '\n'), 0o644)
	return err
}

// ReadVGPUTypeNames reads the memory through atomicfile.Read (a link, a
// FIFO or an oversized file there is an error naming it); a missing file
// is an empty memory.
func ReadVGPUTypeNames(path string) (VGPUTypeNames, error) {
	b, err := atomicfile.Read(path)
	if errors.Is(err, fs.ErrNotExist) {
		return VGPUTypeNames{GPUs: map[string]map[string]string{}}, nil
	}
	if err != nil {
		return VGPUTypeNames{}, err
	}
	return ParseVGPUTypeNames(path, b)
}

// ParseVGPUTypeNames parses the memory's content; errors name path.
func ParseVGPUTypeNames(path string, b []byte) (VGPUTypeNames, error) {
	var t VGPUTypeNames
	if err := json.Unmarshal(b, &t); err != nil {
		return VGPUTypeNames{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := t.Validate(); err != nil {
		return VGPUTypeNames{}, fmt.Errorf("%s: %w", path, err)
	}
	if t.GPUs == nil {
		t.GPUs = map[string]map[string]string{}
	}
	return t, nil
}
