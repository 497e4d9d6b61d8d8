package gpucdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// specPrefix marks the spec files this package writes in a shared CDI
// folder.
const specPrefix = "sandbox-gpu-nri-"

// SpecFileName is the file the spec of kind is written to:
// sandbox-gpu-nri-nvidia.com-gpu.yaml for nvidia.com/gpu.
func SpecFileName(kind string) string {
	vendor, class := parser.ParseQualifier(kind)
	return specPrefix + cdi.GenerateSpecName(vendor, class) + ".yaml"
}

// Write writes spec to <dir>/SpecFileName(spec.Kind) through the CDI
// library, which validates it and replaces the file atomically (a
// temporary file and a rename). A file that already holds the same spec is
// left alone (changed false), so runtimes watching the folder see no event.
func Write(spec *cdispec.Spec, dir string) (path string, changed bool, err error) {
	if err := Validate(spec); err != nil {
		return "", false, err
	}
	name := SpecFileName(spec.Kind)
	path = filepath.Join(dir, name)
	if old, err := cdi.ReadSpec(path, 0); err == nil && reflect.DeepEqual(old.Spec, spec) {
		return path, false, nil
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return "", false, fmt.Errorf("write CDI spec %s: %w", path, err)
	}
	if err := cache.WriteSpec(spec, name); err != nil {
		return "", false, fmt.Errorf("write CDI spec %s: %w", path, err)
	}
	return path, true, nil
}

// Remove deletes the spec of kind this package wrote in dir, if any.
func Remove(dir, kind string) error {
	p := filepath.Join(dir, SpecFileName(kind))
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove CDI spec %s: %w", p, err)
	}
	return nil
}

// OtherSpecs lists, sorted, the valid CDI spec files of kind in dirs that
// this package did not write (nvidia-ctk's nvidia.yaml, say), as the CDI
// library loads them. A node with one should not get this package's spec
// as well: two specs of the same priority naming the same device make the
// CDI library drop that device from both.
func OtherSpecs(kind string, dirs ...string) ([]string, error) {
	if len(dirs) == 0 {
		return nil, nil
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI folders %s: %w", strings.Join(dirs, ", "), err)
	}
	vendor, _ := parser.ParseQualifier(kind)
	own := SpecFileName(kind)
	var out []string
	for _, s := range cache.GetVendorSpecs(vendor) {
		if s.Kind == kind && filepath.Base(s.GetPath()) != own {
			out = append(out, s.GetPath())
		}
	}
	slices.Sort(out)
	return out, nil
}
