package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Writer performs sysfs writes. The kernel reacts to them; the simulated
// kernel (package hostsim) implements Writer to react the same way.
type Writer interface {
	WriteFile(path string, data []byte) error
}

// OSWriter writes sysfs attributes like echo does: open for writing without
// create or truncate, one write.
type OSWriter struct{}

// WriteFile writes data to an existing attribute file.
func (OSWriter) WriteFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %q to %s: %w", data, path, err)
	}
	return f.Close()
}

// write writes a sysfs attribute after checking that the path, symlinks
// resolved, is still under the sysfs root: a crafted tree cannot steer a
// write elsewhere.
func (h *Host) write(p, data string) error {
	root, err := filepath.EvalSymlinks(h.sysfs)
	if err != nil {
		return fmt.Errorf("sysfs root %s: %w", h.sysfs, err)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return err
	}
	if dir != root && !strings.HasPrefix(dir, root+string(filepath.Separator)) {
		return fmt.Errorf("write %s: resolves to %s, outside the sysfs root %s", p, dir, root)
	}
	if fi, err := os.Lstat(filepath.Join(dir, filepath.Base(p))); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("write %s: the attribute is a symlink", p)
	}
	return h.writer.WriteFile(p, []byte(data))
}
