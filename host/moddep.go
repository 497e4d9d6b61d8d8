package host

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// ModuleIndex is what depmod wrote about a kernel's modules: modules.dep
// (each module's file and the files it needs), modules.builtin (modules
// compiled into the kernel) and modules.softdep (modules loaded before or
// after another one without a symbol dependency, as vfio_iommu_type1 after
// vfio). Module names are normalized: "vfio-pci" and "vfio_pci" are one.
type ModuleIndex struct {
	files   map[string]string   // module -> its file, relative to the modules folder
	deps    map[string][]string // module -> the modules its file needs (modules.dep order)
	builtin map[string]bool
	pre     map[string][]string // softdep pre:
	post    map[string][]string // softdep post:
}

// moduleSuffixes are the module file endings depmod lists: plain, and
// compressed as the kernel's MODULE_COMPRESS_* options write them.
var moduleSuffixes = []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"}

// moduleOfFile is the normalized module name of a modules.dep path
// (kernel/drivers/vfio/pci/vfio-pci.ko.xz is vfio_pci), and false when the
// path does not end in a module suffix.
func moduleOfFile(p string) (string, bool) {
	base := path.Base(p)
	for _, s := range moduleSuffixes {
		if name, ok := strings.CutSuffix(base, s); ok && name != "" {
			return normalizeModule(name), true
		}
	}
	return "", false
}

// checkModulePath accepts a relative, clean path inside the modules folder
// that names a module file.
func checkModulePath(p string) (string, error) {
	switch {
	case path.IsAbs(p):
		return "", fmt.Errorf("module path %q is absolute, want one relative to the modules folder", p)
	case path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../"):
		return "", fmt.Errorf("module path %q is not a clean path inside the modules folder", p)
	}
	name, ok := moduleOfFile(p)
	if !ok {
		return "", fmt.Errorf("module path %q does not end in %s", p, strings.Join(moduleSuffixes, ", "))
	}
	if !validModuleName(name) {
		return "", fmt.Errorf("module path %q: invalid module name %q", p, name)
	}
	return name, nil
}

// validModuleName accepts what the kernel accepts as a module name:
// letters, digits and underscores (after normalizing dashes).
func validModuleName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// maxIndexLine bounds one line of a module index (modules.dep lines of
// the largest drivers are a few KiB).
const maxIndexLine = 1 << 20

// lines calls fn with each non-blank, non-comment line of r and its
// number; a line over maxIndexLine is an error.
func lines(r io.Reader, fn func(n int, text string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxIndexLine)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if err := fn(n, text); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("after line %d: %w", n, err)
	}
	return nil
}

// ParseModulesDep reads modules.dep text: "FILE: DEP DEP...", one module a
// line, every path relative to the modules folder. A line without a colon,
// a path outside the folder or without a module suffix, or a module listed
// twice is an error naming the line.
func ParseModulesDep(r io.Reader) (*ModuleIndex, error) {
	ix := &ModuleIndex{files: map[string]string{}, deps: map[string][]string{}, builtin: map[string]bool{},
		pre: map[string][]string{}, post: map[string][]string{}}
	seen := map[string]int{}
	err := lines(r, func(n int, text string) error {
		file, rest, ok := strings.Cut(text, ":")
		if !ok {
			return fmt.Errorf("modules.dep line %d: want \"FILE: DEPENDENCIES\", got %q", n, text)
		}
		file = strings.TrimSpace(file)
		name, err := checkModulePath(file)
		if err != nil {
			return fmt.Errorf("modules.dep line %d: %w", n, err)
		}
		if prev, dup := seen[name]; dup {
			return fmt.Errorf("modules.dep line %d: module %s listed again (first on line %d)", n, name, prev)
		}
		seen[name] = n
		var deps []string
		for _, d := range strings.Fields(rest) {
			dn, err := checkModulePath(d)
			if err != nil {
				return fmt.Errorf("modules.dep line %d: dependency of %s: %w", n, name, err)
			}
			deps = append(deps, dn)
		}
		ix.files[name], ix.deps[name] = file, deps
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ix, nil
}

// parseBuiltin reads modules.builtin: one module path a line.
func (ix *ModuleIndex) parseBuiltin(r io.Reader) error {
	return lines(r, func(n int, text string) error {
		name, err := checkModulePath(text)
		if err != nil {
			return fmt.Errorf("modules.builtin line %d: %w", n, err)
		}
		ix.builtin[name] = true
		return nil
	})
}

// parseSoftdep reads modules.softdep: "softdep MODULE pre: A B post: C".
func (ix *ModuleIndex) parseSoftdep(r io.Reader) error {
	return lines(r, func(n int, text string) error {
		f := strings.Fields(text)
		if len(f) < 2 || f[0] != "softdep" || !validModuleName(normalizeModule(f[1])) {
			return fmt.Errorf("modules.softdep line %d: want \"softdep MODULE pre: ... post: ...\", got %q", n, text)
		}
		mod := normalizeModule(f[1])
		var pre, post []string
		var into *[]string
		for _, w := range f[2:] {
			switch w {
			case "pre:":
				into = &pre
			case "post:":
				into = &post
			default:
				name := normalizeModule(w)
				if into == nil || !validModuleName(name) {
					return fmt.Errorf("modules.softdep line %d: %q is outside pre: and post:, or no module name", n, w)
				}
				*into = append(*into, name)
			}
		}
		ix.pre[mod] = append(ix.pre[mod], pre...)
		ix.post[mod] = append(ix.post[mod], post...)
		return nil
	})
}

// errNoModule marks a module that is neither in modules.dep nor built in.
var errNoModule = errors.New("no such module")

// IsBuiltin reports whether a module is compiled into the kernel.
func (ix *ModuleIndex) IsBuiltin(module string) bool { return ix.builtin[normalizeModule(module)] }

// File returns a module's file, relative to the modules folder.
func (ix *ModuleIndex) File(module string) (string, bool) {
	f, ok := ix.files[normalizeModule(module)]
	return f, ok
}

// LoadOrder returns the modules to load for module, each after what it
// needs: a pre softdep, then its dependencies (each in turn after what it
// needs), then the module, then a post softdep. Built-in modules and
// softdeps the index lacks are left out (as modprobe does); a missing
// module or dependency, or a dependency cycle, is an error naming it.
func (ix *ModuleIndex) LoadOrder(module string) ([]string, error) {
	name := normalizeModule(module)
	if !validModuleName(name) {
		return nil, fmt.Errorf("invalid module name %q", module)
	}
	if ix.builtin[name] {
		return nil, nil
	}
	if _, ok := ix.files[name]; !ok {
		return nil, fmt.Errorf("module %s: %w in modules.dep or modules.builtin", module, errNoModule)
	}
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(m string, soft bool, path []string) error
	visit = func(m string, soft bool, path []string) error {
		switch {
		case state[m] == 2 || ix.builtin[m]:
			return nil
		case state[m] == 1:
			if soft {
				return nil // a softdep back to a module on the way: modprobe ignores it too
			}
			return fmt.Errorf("module %s: dependency cycle %s -> %s", module, strings.Join(path, " -> "), m)
		}
		if _, ok := ix.files[m]; !ok {
			if soft {
				return nil
			}
			return fmt.Errorf("module %s: %s needs %s, %w in modules.dep", module, path[len(path)-1], m, errNoModule)
		}
		state[m] = 1
		path = append(path, m)
		for _, p := range ix.pre[m] {
			if err := visit(p, true, path); err != nil {
				return err
			}
		}
		for _, d := range ix.deps[m] {
			if err := visit(d, false, path); err != nil {
				return err
			}
		}
		state[m] = 2
		order = append(order, m)
		for _, p := range ix.post[m] {
			if err := visit(p, true, path); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(name, false, nil); err != nil {
		return nil, err
	}
	return order, nil
}
