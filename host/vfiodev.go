package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// IOMMUFD reports whether the iommufd character device exists.
func (h *Host) IOMMUFD() bool {
	_, err := os.Stat(filepath.Join(h.dev, "iommu"))
	return err == nil
}

// StillOnVFIO is the cheap check a device plugin makes at Allocate time:
// the function is on a vfio driver and its /dev/vfio/<group> exists (two
// system calls, no scan).
func (h *Host) StillOnVFIO(a Address, group int) error {
	target, err := os.Readlink(filepath.Join(h.functionDir(a), "driver"))
	if err != nil {
		return fmt.Errorf("PCI function %s has no driver", a)
	}
	if d := filepath.Base(target); !IsVFIODriver(d) {
		return fmt.Errorf("PCI function %s is on driver %s, not vfio", a, d)
	}
	return h.groupNodeExists(group)
}

func (h *Host) groupNodeExists(group int) error {
	node := filepath.Join(h.dev, "vfio", strconv.Itoa(group))
	if _, err := os.Stat(node); err != nil {
		return fmt.Errorf("%s is gone", node)
	}
	return nil
}

// DeviceWatchPaths are the folders whose changes mean the devices a
// device plugin advertises may have changed: /dev/vfio (and its devices/),
// the mdev bus, and the folder of every vfio driver (bind and unbind show
// there). A caller watches them; the host model is what knows where they are.
func (h *Host) DeviceWatchPaths() []string {
	paths := []string{
		filepath.Join(h.dev, "vfio"),
		filepath.Join(h.dev, "vfio", "devices"),
		filepath.Join(h.sysfs, "bus", "mdev", "devices"),
	}
	drivers, _ := dirNames(filepath.Join(h.sysfs, "bus", "pci", "drivers"))
	for _, d := range drivers {
		if IsVFIODriver(d) {
			paths = append(paths, filepath.Join(h.sysfs, "bus", "pci", "drivers", d))
		}
	}
	return paths
}

// GroupClaimer opens a VFIO group node exclusively: an error wrapping
// syscall.EBUSY when another process holds the group (its group fd, or only
// a device fd got through it, which /proc/*/fd does not show as the node).
type GroupClaimer interface {
	Claim(node string) (release func(), err error)
}

// OSClaimer claims group nodes on the running kernel. A node that is
// absent, or not a character device, is not claimed.
type OSClaimer struct{}

// Claim opens node read-write and keeps it open until release.
func (OSClaimer) Claim(node string) (func(), error) {
	noop := func() {}
	if _, ok := charDevice(node); !ok {
		return noop, nil
	}
	f, err := os.OpenFile(node, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return noop, nil
	}
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// ClaimGroup claims /dev/vfio/<group> while a member of the group leaves
// its vfio driver, or while its mdev or VF vGPU is removed. The legacy VFIO
// group node admits one opener at a time: EBUSY means a VM or container
// holds it (even one that kept only a device fd, which no /proc scan
// shows), and while the claim is held nobody can start using the group, so
// an idle check made after the claim stays true until the write.
func (h *Host) ClaimGroup(group int) (release func(), err error) {
	if group == NoGroup {
		return func() {}, nil
	}
	node := filepath.Join(h.dev, "vfio", strconv.Itoa(group))
	release, err = h.claimer.Claim(node)
	if errors.Is(err, syscall.EBUSY) {
		return nil, fmt.Errorf("in use: %s is held by another process", node)
	}
	if err != nil {
		return nil, fmt.Errorf("claim IOMMU group %d: %w", group, err)
	}
	return release, nil
}
