package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Holder is a process holding a device node open.
type Holder struct {
	PID  int
	Comm string
}

func (h Holder) String() string { return fmt.Sprintf("pid %d (%s)", h.PID, h.Comm) }

// Usage is one scan of the open files of every process under the proc root.
type Usage struct {
	open  map[string][]Holder // cleaned absolute path -> holders
	rdevs map[uint64][]Holder // character device number -> holders
	// Unreadable lists live processes whose open files could not be read
	// (no CAP_SYS_PTRACE): while any exist, nothing can be called idle.
	Unreadable []int
}

// Holders returns the processes holding path open, by path as /proc shows
// it.
func (u *Usage) Holders(path string) []Holder { return u.open[filepath.Clean(path)] }

// nodeHolders returns the processes holding a device node of this host's
// dev root open. /proc shows paths as the holder sees them ("/dev/vfio/12"),
// which differ from the dev root when it is mounted elsewhere (a container
// with the host's /dev at /host/dev), so the node also matches by its path
// under /dev and by its device number.
func (h *Host) nodeHolders(u *Usage, node string) []Holder {
	var all []Holder
	all = append(all, u.open[filepath.Clean(node)]...)
	if rel, err := filepath.Rel(h.dev, node); err == nil && h.dev != "/dev" && !strings.HasPrefix(rel, "..") {
		all = append(all, u.open[filepath.Join("/dev", rel)]...)
	}
	if rdev, ok := charDevice(node); ok {
		all = append(all, u.rdevs[rdev]...)
	}
	seen := map[int]bool{}
	out := all[:0]
	for _, hd := range all {
		if !seen[hd.PID] {
			seen[hd.PID] = true
			out = append(out, hd)
		}
	}
	return out
}

// charDevice returns the device number of a character device node.
func charDevice(p string) (uint64, bool) {
	fi, err := os.Stat(p)
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Rdev), true
}

// ScanUsage reads /proc/<pid>/fd of every process. Processes that exit or
// deny access during the scan are skipped; a missing proc root is an error.
func (h *Host) ScanUsage() (*Usage, error) {
	u := &Usage{open: map[string][]Holder{}, rdevs: map[uint64][]Holder{}}
	entries, err := os.ReadDir(h.proc)
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	// This process holds what it claims (ClaimGroup) and is never a user.
	self, _ := os.Readlink(filepath.Join(h.proc, "self"))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || e.Name() == self {
			continue
		}
		fdDir := filepath.Join(h.proc, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) && !h.zombie(e.Name()) {
				u.Unreadable = append(u.Unreadable, pid)
			}
			continue // exited meanwhile, or unreadable (recorded above)
		}
		var holder *Holder
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !filepath.IsAbs(target) {
				continue
			}
			if holder == nil {
				comm, _ := readOptionalAttr(filepath.Join(h.proc, e.Name()), "comm")
				holder = &Holder{PID: pid, Comm: comm}
			}
			p := filepath.Clean(target)
			u.open[p] = append(u.open[p], *holder)
			if strings.HasPrefix(p, "/dev/") || strings.HasPrefix(p, h.dev+"/") {
				if rdev, ok := charDevice(filepath.Join(fdDir, fd.Name())); ok {
					u.rdevs[rdev] = append(u.rdevs[rdev], *holder)
				}
			}
		}
	}
	return u, nil
}

// InUse lists why f is in use: a process holding its VFIO group or device
// node, its host driver's device node, or an up network interface. An
// empty list means idle.
func (h *Host) InUse(f *Function, u *Usage) ([]string, error) {
	if n := len(u.Unreadable); n > 0 {
		return nil, fmt.Errorf("PCI function %s: cannot tell whether it is in use: the open files of %d processes (pid %d first) are unreadable; run with CAP_SYS_PTRACE in the host PID namespace", f.Address, n, u.Unreadable[0])
	}
	var reasons []string
	for _, node := range h.deviceNodes(f) {
		for _, hd := range h.nodeHolders(u, node) {
			reasons = append(reasons, fmt.Sprintf("in use: %s held by %s", node, hd))
		}
	}
	for _, ifname := range f.NetInterfaces {
		up, err := h.links.LinkUp(ifname)
		if err != nil {
			return nil, fmt.Errorf("PCI function %s: %w", f.Address, err)
		}
		if up {
			reasons = append(reasons, fmt.Sprintf("in use: network interface %s is up", ifname))
		}
	}
	return reasons, nil
}

// deviceNodes lists the /dev paths through which f can be used.
func (h *Host) deviceNodes(f *Function) []string {
	var nodes []string
	if f.IOMMUGroup != NoGroup {
		g := strconv.Itoa(f.IOMMUGroup)
		nodes = append(nodes, filepath.Join(h.dev, "vfio", g), filepath.Join(h.dev, "vfio", "noiommu-"+g))
	}
	for _, v := range f.VFIODevices {
		if validName(v) {
			nodes = append(nodes, filepath.Join(h.dev, "vfio", "devices", v))
		}
	}
	if f.Driver == "nvidia" {
		if minor, ok := h.nvidiaMinor(f.Address); ok {
			nodes = append(nodes, filepath.Join(h.dev, fmt.Sprintf("nvidia%d", minor)))
		}
		if f.Role == RoleNVSwitch {
			// Which nvidia-nvswitch minor belongs to which switch is not in
			// sysfs: any holder (the fabric manager) keeps every switch busy.
			switches, _ := filepath.Glob(filepath.Join(h.dev, "nvidia-nvswitch*"))
			nodes = append(nodes, switches...)
		}
	}
	nodes = append(nodes, h.classDeviceNodes(f.Address)...)
	sort.Strings(nodes)
	return nodes
}

// zombie reports whether a process has exited but not been reaped (its fd
// folder is unreadable and it holds nothing).
func (h *Host) zombie(pid string) bool {
	b, err := os.ReadFile(filepath.Join(h.proc, pid, "stat"))
	if err != nil {
		return true // gone
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// classDeviceNodes finds device nodes of class devices the host driver
// created below the function (drm/card0, sound/card0/controlC0, ...),
// from the DEVNAME of their uevent files. Symlinks are not followed.
func (h *Host) classDeviceNodes(a Address) []string {
	root, err := filepath.EvalSymlinks(h.functionDir(a))
	if err != nil {
		return nil
	}
	var nodes []string
	const maxDepth = 3
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		depth := strings.Count(rel, string(filepath.Separator))
		if d.IsDir() && p != root {
			if depth >= maxDepth || isPCIFunctionName(d.Name()) {
				return fs.SkipDir
			}
			return nil
		}
		if d.Name() != "uevent" || p == filepath.Join(root, "uevent") {
			return nil
		}
		if name := devName(p); name != "" {
			nodes = append(nodes, filepath.Join(h.dev, name))
		}
		return nil
	})
	return nodes
}

func isPCIFunctionName(s string) bool {
	_, err := ParseAddress(s)
	return err == nil && strings.Count(s, ":") == 2
}

func devName(ueventPath string) string {
	b, err := os.ReadFile(ueventPath)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "DEVNAME="); ok {
			v = filepath.Clean(v)
			if v != "." && !strings.HasPrefix(v, "..") && !filepath.IsAbs(v) {
				return v
			}
		}
	}
	return ""
}

// CheckIdle rescans the processes and reports an error starting with
// "in use:" when f is in use, right before a change to it.
func (h *Host) CheckIdle(f *Function) error {
	u, err := h.ScanUsage()
	if err != nil {
		return err
	}
	reasons, err := h.InUse(f, u)
	if err != nil {
		return fmt.Errorf("in use: cannot tell: %w", err)
	}
	if len(reasons) > 0 {
		return errors.New(strings.Join(reasons, "; "))
	}
	return nil
}
