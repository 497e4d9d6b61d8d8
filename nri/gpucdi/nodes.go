package gpucdi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// nvidiaMajor is the fixed major of /dev/nvidia<N>, nvidiactl and
// nvidia-modeset (NV_MAJOR_DEVICE_NUMBER).
const nvidiaMajor = 195

const maxSymlinks = 40

var errSymlinkLoop = errors.New("too many levels of symbolic links")

// resolveIn follows every symlink of p (a path inside root) within root,
// the way the root's own processes would see it: absolute targets start
// again at root and ".." stops at root. It returns the resolved path inside
// root, absolute and clean.
func resolveIn(root, p string) (string, error) {
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
		host := filepath.Join(root, next)
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

// charMajors reads the character device majors of <proc>/devices by
// driver name (nvidia-uvm, nvidia-caps). A missing file gives none.
func charMajors(proc string) (map[string]int64, error) {
	p := filepath.Join(proc, "devices")
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	majors := map[string]int64{}
	inChar := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
		case strings.HasSuffix(line, "devices:"):
			inChar = false
		case inChar:
			num, name, ok := strings.Cut(line, " ")
			if n, err := strconv.ParseInt(num, 10, 64); ok && err == nil {
				majors[strings.TrimSpace(name)] = n
			}
		}
	}
	return majors, nil
}

// devNode is the device node <dev>/<name>, /dev/<name> in the container.
// Its numbers come from the node when it is a character device, else from
// major (when known, > 0) and minor.
func devNode(dev, name string, major, minor int64) *cdispec.DeviceNode {
	n := &cdispec.DeviceNode{Path: "/dev/" + name, HostPath: filepath.Join(dev, name)}
	var st unix.Stat_t
	if err := unix.Stat(n.HostPath, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
		rdev := uint64(st.Rdev) //nolint:unconvert // Rdev is uint32 on some platforms.
		n.Type, n.Major, n.Minor = "c", int64(unix.Major(rdev)), int64(unix.Minor(rdev))
		return n
	}
	if major > 0 {
		n.Type, n.Major, n.Minor = "c", major, minor
	}
	return n
}

// exists says whether something is at p (a node, a file, a dangling link).
func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// migCaps finds the minors of /dev/nvidia-caps/nvidia-cap<N> for MIG
// capabilities ("gpu<minor>/gi<gi>/access", "gpu<minor>/gi<gi>/ci<ci>/access").
type migCaps struct {
	proc   string
	minors map[string]int64 // mig-minors; nil when the file is missing
}

func newMigCaps(proc string) (*migCaps, error) {
	c := &migCaps{proc: proc}
	p := filepath.Join(proc, "driver/nvidia-caps/mig-minors")
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	c.minors = map[string]int64{}
	for line := range strings.Lines(string(data)) {
		capName, num, ok := strings.Cut(strings.TrimSpace(line), " ")
		if n, err := strconv.ParseInt(num, 10, 64); ok && err == nil {
			c.minors[capName] = n
		}
	}
	return c, nil
}

// minor returns the minor of capability id ("gpu0/gi1/access"): from
// mig-minors, else from the DeviceFileMinor line of its access file
// (<proc>/driver/nvidia/capabilities/gpu0/mig/gi1/access).
func (c *migCaps) minor(id string) (int64, error) {
	if n, ok := c.minors[id]; ok {
		return n, nil
	}
	gpu, rest, _ := strings.Cut(id, "/")
	p := filepath.Join(c.proc, "driver/nvidia/capabilities", gpu, "mig", rest)
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("MIG capability %s: not in mig-minors, and %w", id, err)
	}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == "DeviceFileMinor" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("MIG capability %s: %s: %w", id, p, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("MIG capability %s: no DeviceFileMinor in %s", id, p)
}

// roMount bind-mounts host read-only at container, nvidia-ctk's options.
func roMount(host, container string) *cdispec.Mount {
	return &cdispec.Mount{
		HostPath: host, ContainerPath: container,
		Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"},
	}
}
