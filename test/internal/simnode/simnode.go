// Package simnode makes a simulated host (host/hostsim) a live node for the one-node cluster: its
// tree (sys/, dev/, proc/) on disk, with sys/ served over FUSE by the test process in the node's
// mount namespace, so that the daemons in the cluster's pods change the simulated host by writing
// its sysfs files as they would on a real node, and each write takes effect (driver links moved,
// /dev/vfio/<group> made or removed, mdevs created, ...) before write(2) returns, as the kernel's
// sysfs handlers do.
//
// Design. The tree is built in Options.Dir with hostsim.CharDevices, so its device nodes are
// character devices (with /dev/null's numbers) that containerd and runc hand to containers. In the
// mount namespace Options.Namespace (the node's, where containerd and the kubelet run) a FUSE file
// system is mounted over Dir/sys itself; the test process, outside that namespace, still sees
// Dir/sys as the plain backing folder and serves it: a loopback (go-fuse) whose entries and
// attributes are never cached (timeouts 0) and whose files are opened with direct I/O, so every
// lookup, read and readlink sees the backing tree as the simulated kernel left it. A write to a
// file is one call to the simulated kernel's WriteFile on the backing path (it writes the file and
// applies the effect; its error number is the write's); truncation is ignored and new files are
// refused, as in sysfs. Paths are the same inside and outside the namespace, so the host roots the
// operand pods are handed (Dir/sys, Dir/dev, Dir/proc: OntoHost, which the cluster suite's admission
// webhook applies to them), the device paths the device plugins report and the symbolic links of the
// tree mean the same everywhere. Dir/dev and Dir/proc are
// plain folders.
//
// The mount is made by `mount -i -t fuse.sandbox-gpu-simnode -o fd=N,...` run with nsenter in the
// namespace, on a /dev/fuse descriptor the test process opened and serves (go-fuse's /dev/fd/N
// mount point). It exists only in that namespace and in the containers' namespaces made from it:
// nothing is mounted on the host, and when the namespace and its containers are gone (the
// cluster's Stop, or the next run's recovery of a crashed one) the mount is gone with them. Close
// detaches it in the namespace and waits until the server has ended.
//
// Limits: only writes the simulated kernel models have an effect (driver_override, bind, unbind,
// new_id, drivers_probe, mdev create and remove, sriov_numvfs, current_vgpu_type); any other
// attribute refuses a write with EACCES. Opening a device node opens /dev/null: the simulated
// one-opener group semantics (hostsim's Claim, HoldOpen) do not reach processes in pods, and
// /proc holds only what the fixture put there (no process of the node shows in it). inotify on the
// served tree sees no changes made by the simulated kernel.
package simnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// FSType is the file system type the served sys/ shows in mountinfo (fuse.<FSType>) and its source.
const FSType = "sandbox-gpu-simnode"

// stNodev is statfs's ST_NODEV flag.
const stNodev = 0x4

// Options say what to simulate and where.
type Options struct {
	Fixture   string // a hostsim fixture, such as "a10"
	Dir       string // an existing, empty folder on a file system without nodev: the tree is built in it
	Namespace string // the mount namespace to serve sys/ in: a /proc/<pid>/ns/mnt file
}

// Node is a simulated host whose sys/ is served in a mount namespace.
type Node struct {
	Kernel *hostsim.Kernel

	opts   Options
	server *fuse.Server
	served chan struct{}
	closed bool
}

// Missing lists what serving a node needs and this host lacks: root, /dev/fuse, the fuse file
// system, nsenter and mount.
func Missing() []string {
	var out []string
	if os.Geteuid() != 0 {
		out = append(out, "root (mknod, mount)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		out = append(out, "/dev/fuse (the fuse kernel module)")
	}
	if fss, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fss), "\tfuse\n") {
		out = append(out, "the fuse file system in /proc/filesystems")
	}
	for _, p := range []string{"nsenter", "mount", "umount"} {
		if _, err := exec.LookPath(p); err != nil {
			out = append(out, p+" (util-linux) on PATH")
		}
	}
	return out
}

// Start builds the fixture's tree in o.Dir and serves its sys/ in o.Namespace.
func Start(ctx context.Context, o Options) (*Node, error) {
	if m := Missing(); len(m) > 0 {
		return nil, fmt.Errorf("simnode: missing %s", strings.Join(m, ", "))
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(o.Dir, &sfs); err != nil {
		return nil, fmt.Errorf("simnode: %w", err)
	}
	if sfs.Flags&stNodev != 0 {
		return nil, fmt.Errorf("simnode: %s is on a file system mounted nodev: its device nodes could not be opened", o.Dir)
	}
	if _, err := os.Stat(o.Namespace); err != nil {
		return nil, fmt.Errorf("simnode: mount namespace: %w", err)
	}
	fx, err := hostsim.Lookup(o.Fixture)
	if err != nil {
		return nil, fmt.Errorf("simnode: %w", err)
	}
	k, err := fx.Build(o.Dir, hostsim.CharDevices())
	if err != nil {
		return nil, fmt.Errorf("simnode: build %s in %s: %w", o.Fixture, o.Dir, err)
	}
	o.Dir = k.Root() // symbolic links resolved, as the kernel names its paths
	n := &Node{Kernel: k, opts: o, served: make(chan struct{})}
	if err := n.serve(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// Root is the simulated host's root: sys/ (served), dev/ and proc/, where OntoHost puts pods.
func (n *Node) Root() string { return n.opts.Dir }

// SysDir is the served sys/ folder.
func (n *Node) SysDir() string { return filepath.Join(n.opts.Dir, "sys") }

// serve mounts the FUSE file system over sys/ in the namespace on a /dev/fuse descriptor of this
// process, and serves it.
func (n *Node) serve(ctx context.Context) error {
	root, err := newRoot(n.SysDir(), n.Kernel)
	if err != nil {
		return err
	}
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("simnode: open /dev/fuse: %w", err)
	}
	if err := n.mount(ctx, fd); err != nil {
		_ = syscall.Close(fd)
		return err
	}
	zero := time.Duration(0)
	opts := &fs.Options{EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{Name: FSType, FsName: FSType, MaxBackground: 16}}
	srv, err := fuse.NewServer(fs.NewNodeFS(root, opts), "/dev/fd/"+strconv.Itoa(fd), &opts.MountOptions)
	if err != nil {
		return errors.Join(fmt.Errorf("simnode: serve %s: %w", n.SysDir(), err), n.unmount(context.Background()))
	}
	n.server = srv
	go func() {
		srv.Serve()
		close(n.served)
	}()
	if err := srv.WaitMount(); err != nil {
		return errors.Join(fmt.Errorf("simnode: serve %s: %w", n.SysDir(), err), n.Close(context.Background()))
	}
	return nil
}

// mount runs mount(8) in the namespace with the descriptor as its fd 3: allow_other (the pods'
// users, some not root) with the kernel checking the files' modes (default_permissions), as sysfs
// does.
func (n *Node) mount(ctx context.Context, fd int) error {
	dup, err := syscall.Dup(fd)
	if err != nil {
		return fmt.Errorf("simnode: %w", err)
	}
	f := os.NewFile(uintptr(dup), "/dev/fuse")
	defer f.Close()
	data := "fd=3,rootmode=40000,user_id=0,group_id=0,allow_other,default_permissions"
	cmd := exec.CommandContext(ctx, "nsenter", "--mount="+n.opts.Namespace, "--",
		"mount", "-i", "-t", "fuse."+FSType, "-o", data, FSType, n.SysDir())
	cmd.ExtraFiles = []*os.File{f}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("simnode: mount %s in %s: %w: %s", n.SysDir(), n.opts.Namespace, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unmount detaches the mount in the namespace, when the namespace is still there.
func (n *Node) unmount(ctx context.Context) error {
	if _, err := os.Stat(n.opts.Namespace); err != nil {
		return nil // the namespace is gone, and its mounts with it
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--mount="+n.opts.Namespace, "--", "umount", "-l", n.SysDir()).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "not mounted") && !strings.Contains(string(out), "no mount point") {
		return fmt.Errorf("simnode: umount %s in %s: %w: %s", n.SysDir(), n.opts.Namespace, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Close detaches the mount and waits until the kernel has ended the FUSE connection, which it does
// once no mount of it is left: the namespace's is detached here, the containers' go with their
// containers (stop them first). The tree stays in Dir.
func (n *Node) Close(ctx context.Context) error {
	if n.closed || n.server == nil {
		return nil
	}
	n.closed = true
	err := n.unmount(ctx)
	select {
	case <-n.served:
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("simnode: %s is still served (a container that mounted it still runs?): %w", n.SysDir(), ctx.Err()))
	}
	return err
}
