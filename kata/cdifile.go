package kata

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
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
// that the plugin did not write: anything but a regular file (a symlink is
// never followed, a FIFO never opened for reading that could block), one
// over maxSpecFile, or one without OwnerMarker.
func checkOurs(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("CDI spec %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return true, fmt.Errorf("CDI spec %s: a %s, not a regular file: %w", path, fileKind(fi.Mode()), errNotOurs)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return true, fmt.Errorf("CDI spec %s: %w", path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return true, fmt.Errorf("CDI spec %s: changed while read, not a regular file: %w", path, errNotOurs)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSpecFile+1))
	if err != nil {
		return true, fmt.Errorf("CDI spec %s: %w", path, err)
	}
	if len(data) > maxSpecFile {
		return true, fmt.Errorf("CDI spec %s: over %d bytes: %w", path, maxSpecFile, errNotOurs)
	}
	if !bytes.HasPrefix(data, []byte(OwnerMarker+"\n")) {
		return true, fmt.Errorf("CDI spec %s: no %q line: %w", path, OwnerMarker, errNotOurs)
	}
	return true, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsDir():
		return "folder"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device node"
	}
	return "special file"
}

// writeSpecFile writes the spec to dir/name atomically: a new temporary
// file (O_CREAT|O_EXCL|O_NOFOLLOW, so nothing planted at its name is
// followed or reused) renamed over the name, which replaces a file there
// without following it. A file at the name that the plugin did not write
// is refused and left as it is.
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
	data := append([]byte(OwnerMarker+"\n"), body...)
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return fmt.Errorf("CDI spec %s: %w", path, err)
	}
	// A dot name with a .tmp extension: the CDI cache reads only .yaml
	// and .json files, so no reader sees it half-written.
	tmp := filepath.Join(dir, "."+name+"."+hex.EncodeToString(suffix[:])+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("CDI spec %s: %w", path, err)
	}
	err = func() error {
		defer f.Close()
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Chmod(0o644); err != nil { // whatever the umask
			return err
		}
		return f.Sync()
	}()
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("CDI spec %s: %w", path, err)
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
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove CDI spec %s: %w", path, err)
	}
	return nil
}
