package host

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoKernelRelease is the error of KernelRelease, ModulesDir, Aliases and
// DriverStateOf when the proc root has no sys/kernel/osrelease (and no
// modules folder was given): the modules folder cannot be found. Callers
// degrade to vfio-pci, without modules.alias, and say so.
var ErrNoKernelRelease = errors.New("kernel release unknown")

// KernelRelease reads the running kernel's release from the proc root.
func (h *Host) KernelRelease() (string, error) {
	rel, err := readAttr(filepath.Join(h.proc, "sys", "kernel"), "osrelease")
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %w", ErrNoKernelRelease, err)
	}
	if err != nil {
		return "", err
	}
	if !validName(rel) {
		return "", fmt.Errorf("%s: invalid kernel release %q", filepath.Join(h.proc, "sys", "kernel", "osrelease"), rel)
	}
	return rel, nil
}

// ModulesDir returns where modules and their indexes are read from: the
// configured folder, else <modules root>/<release> when it has a
// modules.dep (the node's /lib/modules mounted into the pod), else the
// host's /lib/modules/<release> seen through PID 1's root under the proc
// root (a container with the host's PID namespace and no such mount),
// else <modules root>/<release>.
func (h *Host) ModulesDir() (string, error) {
	if h.modules != "" {
		return h.modules, nil
	}
	rel, err := h.KernelRelease()
	if err != nil {
		return "", err
	}
	own := filepath.Join(h.modulesRoot, rel)
	if _, err := os.Stat(filepath.Join(own, "modules.dep")); err == nil {
		return own, nil
	}
	viaInit := filepath.Join(h.proc, "1", "root", "lib", "modules", rel)
	if _, err := os.Stat(filepath.Join(viaInit, "modules.dep")); err == nil {
		return viaInit, nil
	}
	return own, nil
}

// Aliases reads modules.alias and modules.builtin.alias (when present).
// A missing modules.alias yields no aliases: the caller falls back to
// vfio-pci and to the drivers sysfs shows.
func (h *Host) Aliases() ([]Alias, error) {
	dir, err := h.ModulesDir()
	if err != nil {
		return nil, err
	}
	var all []Alias
	for _, name := range []string{"modules.alias", "modules.builtin.alias"} {
		p := filepath.Join(dir, name)
		b, _, err := readIfExists(p)
		if err != nil {
			return nil, err
		}
		as, err := ParseAliases(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		all = append(all, as...)
	}
	return all, nil
}

// normalizeModule turns "vfio-pci.ko.xz" or "vfio-pci" into "vfio_pci".
func normalizeModule(name string) string {
	if i := strings.Index(name, ".ko"); i >= 0 {
		name = name[:i]
	}
	return strings.ReplaceAll(name, "-", "_")
}
