// Package mountinfo reads /proc/self/mountinfo and detaches the mounts left below a suite's
// folders.
package mountinfo

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	Point  string
	FSType string
}

// Read lists the mounts of this process's mount namespace.
func Read() ([]Mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	var out []Mount
	for line := range strings.Lines(string(data)) {
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, Mount{Point: Unescape(fields[4]), FSType: fields[sep+1]})
	}
	return out, nil
}

// UnmountUnder detaches every mount below dir (and dir itself with self), deepest first, and
// returns the failures (a mount already gone, EINVAL, is none). Mounts made in another mount
// namespace are not seen here.
func UnmountUnder(dir string, self bool) error {
	mounts, err := Read()
	if err != nil {
		return err
	}
	var points []string
	for _, m := range mounts {
		if strings.HasPrefix(m.Point, dir+"/") || (self && m.Point == dir) {
			points = append(points, m.Point)
		}
	}
	slices.Reverse(points)
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// Unescape undoes the octal escapes (\040 for a space) of /proc/self/mountinfo.
func Unescape(s string) string {
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
