package gpucdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// driverRoot is the root of the driver's files (--driver-root: / for a
// driver installed on the host, /run/nvidia/driver for a containerized
// one). It is the only code of gpucdi that reads the node's files to build
// a spec, and it reads only the driver's libraries and binaries under this
// root. The host's /dev and /proc are read through package host's model
// (nodes.go); the driver root is none of sysfs, /dev or /proc, so it is not
// a host root but a concern of its own.
type driverRoot string

const maxSymlinks = 40

var errSymlinkLoop = errors.New("too many levels of symbolic links")

// files finds the driver's libraries of version and their links in libDirs,
// and the driver binaries in binDirs, as read-only mounts sorted by
// container path. It fails when libcuda.so.<version> is not among them.
func (root driverRoot) files(version string, libDirs, binDirs []string) ([]*cdispec.Mount, error) {
	if version == "" || strings.ContainsAny(version, "/*?[") {
		return nil, fmt.Errorf("driver version %q: not a version", version)
	}
	libs, err := root.libraryMounts(version, libDirs)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(libs, func(m *cdispec.Mount) bool {
		return path.Base(m.ContainerPath) == "libcuda.so."+version
	}) {
		return nil, fmt.Errorf("driver %s: libcuda.so.%s not found under driver root %s (searched %s)",
			version, version, root, strings.Join(libDirs, ", "))
	}
	bins, err := root.binaryMounts(binDirs)
	if err != nil {
		return nil, err
	}
	mounts := append(libs, bins...)
	slices.SortFunc(mounts, func(a, b *cdispec.Mount) int { return strings.Compare(a.ContainerPath, b.ContainerPath) })
	return mounts, nil
}

// libraryMounts mounts, from the resolved file, every driver library of
// the folders (isDriverLibrary) and every other entry of the folders that
// resolves to one of the libraries of any folder (a link in
// /usr/lib/x86_64-linux-gnu may lead into its nvidia/current). Each is
// mounted at its own path and, once per name (the first folder's wins), at
// ContainerLibDir/<name>.
func (root driverRoot) libraryMounts(version string, dirs []string) ([]*cdispec.Mount, error) {
	type entry struct{ dir, name string }
	var libs, links []entry
	seen := map[string]bool{} // resolved folders
	for _, dir := range dirs {
		rdir, names, err := root.readDir(dir)
		if err != nil {
			return nil, err
		}
		if seen[rdir] {
			continue // /lib64 -> usr/lib64 on a merged-/usr root
		}
		seen[rdir] = true
		for _, name := range names {
			if isDriverLibrary(name, version) {
				libs = append(libs, entry{rdir, name})
			} else {
				links = append(links, entry{rdir, name})
			}
		}
	}
	var mounts []*cdispec.Mount
	mounted := map[string]bool{} // container paths
	mount := func(target, container string) {
		if !mounted[container] {
			mounted[container] = true
			mounts = append(mounts, roMount(root.join(target), container))
		}
	}
	targets := map[string]bool{} // resolved paths of the libraries
	type alias struct{ target, name string }
	var aliases []alias // the ContainerLibDir mounts
	for _, e := range libs {
		target, ok, err := root.regular(path.Join(e.dir, e.name))
		if err != nil {
			return nil, err
		}
		if ok {
			targets[target] = true
			mount(target, path.Join(e.dir, e.name))
			aliases = append(aliases, alias{target, e.name})
		}
	}
	for _, e := range links {
		target, ok, err := root.regular(path.Join(e.dir, e.name))
		if err != nil {
			return nil, err
		}
		if ok && targets[target] {
			mount(target, path.Join(e.dir, e.name))
			aliases = append(aliases, alias{target, e.name})
		}
	}
	// After every same-path mount, so that a searched ContainerLibDir
	// keeps its own files.
	for _, a := range aliases {
		mount(a.target, path.Join(ContainerLibDir, a.name))
	}
	return mounts, nil
}

// isDriverLibrary says whether a file name is one of the driver's
// libraries: lib*.so.<version>, or libnvidia-nvvm70.so.* (the legacy NVVM
// library, named libnvidia-nvvm70.so.4 without the driver version since
// R575, as nvidia-ctk finds it).
func isDriverLibrary(name, version string) bool {
	return strings.HasPrefix(name, "lib") && strings.HasSuffix(name, ".so."+version) ||
		strings.HasPrefix(name, "libnvidia-nvvm70.so.")
}

// binaryMounts mounts the first of each driver binary found in the folders.
func (root driverRoot) binaryMounts(dirs []string) ([]*cdispec.Mount, error) {
	var mounts []*cdispec.Mount
	found := map[string]bool{}
	for _, dir := range dirs {
		rdir, names, err := root.readDir(dir)
		if err != nil {
			return nil, err
		}
		for _, name := range driverBinaries() {
			if found[name] || !slices.Contains(names, name) {
				continue
			}
			target, ok, err := root.regular(path.Join(rdir, name))
			if err != nil {
				return nil, err
			}
			if ok {
				found[name] = true
				mounts = append(mounts, roMount(root.join(target), path.Join(rdir, name)))
			}
		}
	}
	return mounts, nil
}

// readDir resolves dir inside root and lists it; a missing folder is
// empty.
func (root driverRoot) readDir(dir string) (string, []string, error) {
	rdir, err := root.resolve(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return dir, nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("driver folder %s under %s: %w", dir, root, err)
	}
	entries, err := os.ReadDir(root.join(rdir))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return rdir, nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("driver folder %s under %s: %w", dir, root, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return rdir, names, nil
}

// regular resolves p inside root and says whether it is a regular file;
// dangling links and loops are not, other errors are returned.
func (root driverRoot) regular(p string) (string, bool, error) {
	target, err := root.resolve(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, errSymlinkLoop) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("driver file %s under %s: %w", p, root, err)
	}
	fi, err := os.Stat(root.join(target))
	if err != nil {
		return "", false, fmt.Errorf("driver file %s under %s: %w", p, root, err)
	}
	return target, fi.Mode().IsRegular(), nil
}

// join is the host path of p, a path inside root.
func (root driverRoot) join(p string) string { return filepath.Join(string(root), p) }

// resolve follows every symlink of p (a path inside root) within root, the
// way the root's own processes would see it: absolute targets start again
// at root and ".." stops at root. It returns the resolved path inside root,
// absolute and clean.
func (root driverRoot) resolve(p string) (string, error) {
	resolved := "" // "" is root itself
	rest := strings.Split(p, "/")
	hops := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = strings.TrimSuffix(path.Dir("/"+resolved), "/")
			if resolved == "/" {
				resolved = ""
			}
			continue
		}
		next := resolved + "/" + c
		host := root.join(next)
		fi, err := os.Lstat(host)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if hops++; hops > maxSymlinks {
			return "", fmt.Errorf("resolve %s in %s: %w", p, root, errSymlinkLoop)
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(target, "/") {
			resolved = ""
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	if resolved == "" {
		return "/", nil
	}
	return resolved, nil
}
