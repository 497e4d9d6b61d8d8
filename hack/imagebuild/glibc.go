package main

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// interpreter returns the ELF interpreter (PT_INTERP) of a binary, and
// whether it has one: a static Go binary has none.
func interpreter(ef *elf.File) (string, bool, error) {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return "", false, fmt.Errorf("read PT_INTERP: %w", err)
		}
		return strings.TrimRight(string(b), "\x00"), true, nil
	}
	return "", false, nil
}

// arch is what an ELF machine is called: its Go architecture (the image's
// platform) and Debian's multiarch triplet, the folder glibc's loader
// searches by default (/lib/<triplet>, /usr/lib/<triplet>).
type arch struct{ goarch, triplet string }

// archOf names an ELF machine the image builder supports.
func archOf(m elf.Machine) (arch, error) {
	switch m {
	case elf.EM_X86_64:
		return arch{"amd64", "x86_64-linux-gnu"}, nil
	case elf.EM_AARCH64:
		return arch{"arm64", "aarch64-linux-gnu"}, nil
	}
	return arch{}, fmt.Errorf("unsupported ELF machine %v", m)
}

// GlibcFiles returns the files of the extracted libc6 package at root that a
// dynamically linked binary needs, at the paths the package installs them:
// its interpreter (with the links to it), the libraries it names (DT_NEEDED)
// and the extra ones (libraries that libraries it dlopens need), and what
// those need in turn. Every one must come from root: a binary that needs a
// library libc6 does not ship is an error, not a silent copy from the host.
func GlibcFiles(ef *elf.File, root string, extra []string) ([]File, error) {
	interp, ok, err := interpreter(ef)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("statically linked: no glibc needed")
	}
	machine, err := archOf(ef.Machine)
	if err != nil {
		return nil, err
	}
	// glibc's loader searches these (Debian's multiarch folders first) when
	// the image has no /etc/ld.so.cache, and it has none.
	searchDirs := []string{"/lib/" + machine.triplet, "/usr/lib/" + machine.triplet, "/lib", "/usr/lib"}

	c := collector{root: root, files: map[string]File{}}
	if err := c.add(interp); err != nil {
		return nil, fmt.Errorf("interpreter %s: %w", interp, err)
	}
	needed, err := ef.ImportedLibraries()
	if err != nil {
		return nil, err
	}
	queue := append(slices.Clone(needed), extra...)
	seen := map[string]bool{}
	for len(queue) > 0 {
		soname := queue[0]
		queue = queue[1:]
		if seen[soname] {
			continue
		}
		seen[soname] = true
		if strings.Contains(soname, "/") {
			return nil, fmt.Errorf("needs %s by path", soname)
		}
		var found string
		for _, d := range searchDirs {
			if _, err := c.lstat(path.Join(d, soname)); err == nil {
				found = path.Join(d, soname)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("needs %s, which Debian's libc6 does not ship (searched %s under %s)", soname, strings.Join(searchDirs, ", "), root)
		}
		real, err := c.resolve(found)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", soname, err)
		}
		if err := c.add(found); err != nil {
			return nil, fmt.Errorf("%s: %w", soname, err)
		}
		lf, err := elf.Open(filepath.Join(root, real))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", real, err)
		}
		more, err := lf.ImportedLibraries()
		lf.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", real, err)
		}
		queue = append(queue, more...)
	}
	out := make([]File, 0, len(c.files))
	for _, f := range c.files {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// collector gathers files of an extracted package, following links.
type collector struct {
	root  string
	files map[string]File
}

// lstat is os.Lstat of p inside root, refusing parent folders that are
// links: those could lead out of root, to the host's own files.
func (c *collector) lstat(p string) (fs.FileInfo, error) {
	p = path.Clean("/" + p)
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		fi, err := os.Lstat(filepath.Join(c.root, d))
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("%s: %s is not a plain folder in %s", p, d, c.root)
		}
	}
	return os.Lstat(filepath.Join(c.root, p))
}

// resolve follows the links of p (an absolute path inside root, links
// resolved inside root too) to a regular file.
func (c *collector) resolve(p string) (string, error) {
	for range 16 {
		fi, err := c.lstat(p)
		if err != nil {
			return "", err
		}
		switch {
		case fi.Mode().IsRegular():
			return p, nil
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(filepath.Join(c.root, p))
			if err != nil {
				return "", err
			}
			if !path.IsAbs(t) {
				t = path.Join(path.Dir(p), t)
			}
			p = path.Clean(t)
		default:
			return "", fmt.Errorf("%s is neither a file nor a link", p)
		}
	}
	return "", fmt.Errorf("%s: too many links", p)
}

// add records p and, when it is a link, what it points to, down to the
// file. Files keep their executable bit; owners and times are dropped.
func (c *collector) add(p string) error {
	for range 16 {
		if _, done := c.files[p]; done {
			return nil
		}
		full := filepath.Join(c.root, p)
		fi, err := c.lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(full)
			if err != nil {
				return err
			}
			mode := int64(0o644)
			if fi.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			c.files[p] = File{Path: p, Mode: mode, Data: data}
			return nil
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(full)
			if err != nil {
				return err
			}
			c.files[p] = File{Path: p, Link: t}
			if !path.IsAbs(t) {
				t = path.Join(path.Dir(p), t)
			}
			p = path.Clean(t)
		default:
			return fmt.Errorf("%s is neither a file nor a link", p)
		}
	}
	return fmt.Errorf("%s: too many links", p)
}
