package kata

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/internal/atomicfile"
)

// OwnerMarker is the first line of every spec file the Kata plugin writes.
// A YAML comment, so that the spec keeps the lowest cdiVersion its content
// needs (a spec annotation would need 0.6.0). The plugin replaces or
// removes a file at its names only when it starts with this line.
const OwnerMarker = "# sandbox-gpu.io/written-by: kata-device-plugin"

// maxSpecFile bounds what the plugin reads of a file at one of its names.
const maxSpecFile = 1 << 20

// errNotOurs refuses to replace or remove a file the plugin did not write.
var errNotOurs = errors.New("not a spec the Kata device plugin wrote; left as it is")

// checkOurs reports whether a file is at path; an error when one is there
// that the plugin did not write: anything but a regular file (read through
// atomicfile.ReadMax: a symlink is never followed, a FIFO never opened in a
// way that could block), one over maxSpecFile, or one without OwnerMarker.
func checkOurs(path string) (bool, error) {
	data, err := atomicfile.ReadMax(path, maxSpecFile)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("CDI spec %s: %w: %w", path, err, errNotOurs)
	}
	if !bytes.HasPrefix(data, []byte(OwnerMarker+"\n")) {
		return true, fmt.Errorf("CDI spec %s: no %q line: %w", path, OwnerMarker, errNotOurs)
	}
	return true, nil
}

// writeSpecFile writes the spec to dir/name through atomicfile.Write: a
// new temporary file (O_CREAT|O_EXCL|O_NOFOLLOW, a dot name the CDI cache
// never reads) renamed over the name, which replaces a file there without
// following it. A file at the name that the plugin did not write is
// refused and left as it is.
func writeSpecFile(dir, name string, spec *cdispec.Spec) error {
	path := filepath.Join(dir, name)
	if err := validSpec(spec); err != nil {
		return fmt.Errorf("CDI spec %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("CDI spec %s: %w", path, err)
	}
	if _, err := checkOurs(path); err != nil {
		return err
	}
	body, err := yaml.Marshal(spec)
	if err != nil {
		return fmt.Errorf("CDI spec %s: %w", path, err)
	}
	if _, err := atomicfile.Write(path, append([]byte(OwnerMarker+"\n"), body...), 0o644); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	return nil
}

// validSpec checks what a CDI reader checks: the kind, each device's name
// and the edits (the spec-wide and each device's).
func validSpec(spec *cdispec.Spec) error {
	vendor, class := parser.ParseQualifier(spec.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return fmt.Errorf("kind %q: %w", spec.Kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return fmt.Errorf("kind %q: %w", spec.Kind, err)
	}
	if err := (&cdi.ContainerEdits{ContainerEdits: &spec.ContainerEdits}).Validate(); err != nil {
		return err
	}
	for i := range spec.Devices {
		d := &spec.Devices[i]
		if err := parser.ValidateDeviceName(d.Name); err != nil {
			return err
		}
		if err := (&cdi.ContainerEdits{ContainerEdits: &d.ContainerEdits}).Validate(); err != nil {
			return fmt.Errorf("device %q: %w", d.Name, err)
		}
	}
	return nil
}

// removeSpecFile removes dir/name when the plugin wrote it (unlink does
// not follow a link); a file it did not write is refused and left.
func removeSpecFile(dir, name string) error {
	path := filepath.Join(dir, name)
	exists, err := checkOurs(path)
	if err != nil || !exists {
		return err
	}
	if err := atomicfile.Remove(path); err != nil {
		return fmt.Errorf("remove CDI spec %s: %w", path, err)
	}
	return nil
}
