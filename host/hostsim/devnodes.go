package hostsim

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Option changes how New builds a simulated kernel.
type Option func(*Kernel)

// nullDev is /dev/null's device number (1:3) in the kernel's old
// encoding, which mknod(2) takes for small numbers.
const nullDev = 1<<8 | 3

// CharDevices makes the kernel create every device node it makes
// (/dev/vfio/vfio, /dev/vfio/<group>, /dev/vfio/devices/vfioN, /dev/iommu,
// /dev/nvidia<minor>, class device nodes and a fixture's extra nodes) as a
// character device with /dev/null's numbers instead of an empty regular
// file, so that a container runtime can hand the nodes to containers (it
// refuses anything that is not a device). mknod needs root (CAP_MKNOD), and
// a process can open the nodes only where the tree's file system is not
// mounted nodev.
//
// Opening such a node opens /dev/null: host.OSClaimer's claim of a group
// node succeeds and never sees EBUSY. The simulated one-opener semantics
// of group nodes (Kernel.Claim, HoldOpen, HoldDeviceFD) hold only for
// callers that go through the Kernel in-process.
func CharDevices() Option {
	return func(k *Kernel) { k.charDevs = true }
}

// makeNode creates a device node the way touch(1) would create a file:
// an existing node is left as it is.
func (k *Kernel) makeNode(p string) error { return k.makeNodeMode(p, 0o666) }

func (k *Kernel) makeNodeMode(p string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if !k.charDevs {
		return os.WriteFile(p, nil, perm)
	}
	if _, err := os.Lstat(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := syscall.Mknod(p, syscall.S_IFCHR|uint32(perm), nullDev); err != nil {
		return &os.PathError{Op: "mknod", Path: p, Err: err}
	}
	return nil
}
