package realkernel

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"sort"
	"strings"
)

// cpioWriter writes an uncompressed "newc" cpio archive, the format the kernel unpacks as
// its initramfs. Only what the guest needs: directories, regular files, device nodes.
type cpioWriter struct {
	w    *bufio.Writer
	ino  int
	dirs map[string]bool // directories written so far
	err  error
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriter(w), dirs: map[string]bool{".": true}}
}

// mkdirAll writes the directory entries of name and its parents not yet written: the kernel
// does not create missing parents when it unpacks.
func (c *cpioWriter) mkdirAll(name string) {
	if c.dirs[name] {
		return
	}
	c.mkdirAll(pathpkg.Dir(name))
	c.dirs[name] = true
	c.dir(name)
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeChar = 0o020000
)

// entry writes one header, the name and the data, each padded to four bytes.
func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&modeDir != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) dir(name string)                         { c.entry(name, modeDir|0o755, 0, 0, nil) }
func (c *cpioWriter) file(name string, perm uint32, b []byte) { c.entry(name, modeFile|perm, 0, 0, b) }
func (c *cpioWriter) charDev(name string, major, minor int) {
	c.entry(name, modeChar|0o600, major, minor, nil)
}
func (c *cpioWriter) close() error { c.entry("TRAILER!!!", 0, 0, 0, nil); return c.flush() }
func (c *cpioWriter) flush() error {
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}

// initramfs is what goes into a guest: busybox, the kernel's modules as a host has them
// (lib/modules/<release>, with modules.alias and the other indexes), vfio-manager or other
// static binaries, the init script and the scenario it runs.
type initramfs struct {
	busybox     string
	modulesDir  string            // <kernel dir>/lib/modules/<release>
	release     string            // the kernel release, its folder name under lib/modules
	modules     []string          // files under modulesDir that init loads, in this order
	wholeTree   bool              // every file of modulesDir, as a node's /lib/modules/<release> has them
	vfioManager string            // "" for none
	binaries    map[string]string // more executables: name under / -> host file
	init        string
	scenario    string // sourced by init
}

// writeTo writes the archive to path: /init, /scenario.sh, /bin/busybox (init installs the
// applet links), /vfio-manager and the other binaries, /lib/modules/<release>/{modules.*,the
// modules to load} (or, with wholeTree, every file of the modules folder) and /etc/modules.load
// listing the modules init loads, in load order.
func (r initramfs) writeTo(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("initramfs %s: %w", path, err)
	}
	if err := r.write(f); err != nil {
		f.Close()
		return fmt.Errorf("initramfs %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("initramfs %s: %w", path, err)
	}
	return nil
}

func (r initramfs) write(w io.Writer) error {
	c := newCPIOWriter(w)
	for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "tmp", "run"} {
		c.mkdirAll(d)
	}
	c.charDev("dev/console", 5, 1)
	c.file("init", 0o755, []byte(r.init))
	c.file("scenario.sh", 0o644, []byte(r.scenario))

	files := map[string]string{"bin/busybox": r.busybox} // archive name -> host file
	if r.vfioManager != "" {
		files["vfio-manager"] = r.vfioManager
	}
	for name, p := range r.binaries {
		files[name] = p
	}
	guestDir := "lib/modules/" + r.release
	indexes, err := filepath.Glob(filepath.Join(r.modulesDir, "modules.*"))
	if err != nil {
		return fmt.Errorf("module indexes: %w", err)
	}
	if r.wholeTree {
		if indexes, err = regularFiles(r.modulesDir); err != nil {
			return err
		}
	}
	var load strings.Builder
	for i, m := range append(indexes, r.modules...) {
		rel, err := filepath.Rel(r.modulesDir, m)
		if err != nil || strings.HasPrefix(rel, "..") {
			return fmt.Errorf("module %s is not under %s", m, r.modulesDir)
		}
		name := guestDir + "/" + filepath.ToSlash(rel)
		files[name] = m
		if i >= len(indexes) {
			load.WriteString("/" + name + "\n")
		}
	}
	c.file("etc/modules.load", 0o644, []byte(load.String()))

	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b, err := os.ReadFile(files[name])
		if err != nil {
			return err
		}
		perm := uint32(0o644)
		if !strings.HasPrefix(name, "lib/") {
			perm = 0o755
		}
		c.mkdirAll(pathpkg.Dir(name))
		c.file(name, perm, b)
	}
	return c.close()
}

// regularFiles lists every regular file under dir.
func regularFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("modules tree %s: %w", dir, err)
	}
	return out, nil
}
