package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// mount is one line of /proc/self/mountinfo.
type mount struct {
	point  string
	fstype string
}

func readMountinfo() ([]mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	var out []mount
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mount{point: unescapeMountinfo(fields[4]), fstype: fields[sep+1]})
	}
	return out, nil
}

// unmountUnder detaches every mount below dir (and dir itself with self), deepest first. Mounts
// made inside the node's mount namespace are not seen here: they go with the namespace.
func unmountUnder(dir string, self bool) {
	mounts, err := readMountinfo()
	if err != nil {
		return
	}
	var points []string
	for _, m := range mounts {
		if strings.HasPrefix(m.point, dir+"/") || (self && m.point == dir) {
			points = append(points, m.point)
		}
	}
	slices.Reverse(points)
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// runCommand runs a host program and returns its combined output.
func runCommand(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
