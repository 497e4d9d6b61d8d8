package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/mountinfo"
)

// cgroupHierarchies lists the mount points of every cgroup (v1) and cgroup2 hierarchy.
func cgroupHierarchies() ([]string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if (m.FSType == "cgroup" || m.FSType == "cgroup2") && !slices.Contains(out, m.Point) {
			out = append(out, m.Point)
		}
	}
	return out, nil
}

// removeKubeCgroups removes the kubelet's top cgroups that are not in keep from every hierarchy:
// the processes left in them are killed, then the folders are removed deepest first.
func removeKubeCgroups(keep []string, logf func(string, ...any)) error {
	hier, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hier {
		for _, c := range kubeCgroups {
			top := filepath.Join(h, c)
			if slices.Contains(keep, top) {
				continue
			}
			if _, err := os.Stat(top); err != nil {
				continue
			}
			logf("cleanup: removing cgroup %s", top)
			if err := removeCgroupTree(top); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree kills every process in the cgroup tree at top and removes its folders, deepest
// first, trying again while processes are still exiting.
func removeCgroupTree(top string) error {
	var last error
	err := poll(context.Background(), 20*time.Second, func(context.Context) (bool, error) {
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for _, d := range dirs {
			killCgroupProcs(d)
		}
		// Deepest first: children before parents.
		slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		last = nil
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				last = fmt.Errorf("remove cgroup %s: %w", d, err)
			}
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w (%w)", last, err)
	}
	return nil
}

// killCgroupProcs SIGKILLs the processes in one cgroup folder (thawing a frozen one first).
func killCgroupProcs(dir string) {
	if state, err := os.ReadFile(filepath.Join(dir, "freezer.state")); err == nil &&
		strings.TrimSpace(string(state)) != "THAWED" {
		_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0o644)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
