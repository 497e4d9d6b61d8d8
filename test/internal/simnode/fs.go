package simnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// sysNode is a file or folder of the served sys/ tree: a loopback over the backing tree, except
// that a write to a file goes to the simulated kernel (which writes the file and applies the
// write's effect) before the write(2) returns, and that truncation is ignored, as sysfs ignores it.
// Reads, symbolic links and folder listings pass through.
type sysNode struct {
	*fs.LoopbackNode
	kernel *hostsim.Kernel
}

var (
	_ fs.NodeOpener      = (*sysNode)(nil)
	_ fs.NodeWriter      = (*sysNode)(nil)
	_ fs.NodeWritever    = (*sysNode)(nil)
	_ fs.NodeSetattrer   = (*sysNode)(nil)
	_ fs.NodeCreater     = (*sysNode)(nil)
	_ fs.NodeWrapChilder = (*sysNode)(nil)
)

// newRoot is the root of a loopback over backing whose nodes are sysNodes.
func newRoot(backing string, k *hostsim.Kernel) (fs.InodeEmbedder, error) {
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("simnode: loopback over %s: %w", backing, err)
	}
	lb := root.(*fs.LoopbackNode)
	n := &sysNode{LoopbackNode: lb, kernel: k}
	lb.RootData.RootNode = n
	return n, nil
}

// WrapChild makes every node a sysNode.
func (n *sysNode) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &sysNode{LoopbackNode: ops.(*fs.LoopbackNode), kernel: n.kernel}
}

// backing is the node's path in the backing tree: the path the simulated kernel knows.
func (n *sysNode) backing() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

// Open opens the backing file without O_TRUNC (a write that the kernel refuses must leave the
// attribute as it was) and with direct I/O: every read goes to the backing file, which the
// simulated kernel changes behind the page cache's back.
func (n *sysNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags&^syscall.O_TRUNC)
	return fh, fuseFlags | fuse.FOPEN_DIRECT_IO, errno
}

// Create refuses new files: sysfs has only the files the kernel made.
func (n *sysNode) Create(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EACCES
}

// Write is one store to a sysfs attribute: the simulated kernel's WriteFile with the whole buffer,
// whatever the offset; its error (EBUSY, EINVAL, ENODEV, EACCES for an attribute it does not model,
// ...) is the write's.
func (n *sysNode) Write(_ context.Context, _ fs.FileHandle, data []byte, _ int64) (uint32, syscall.Errno) {
	if err := n.kernel.WriteFile(n.backing(), data); err != nil {
		return 0, errno(err)
	}
	return uint32(len(data)), 0
}

// Writev is Write with the buffers joined.
func (n *sysNode) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	return n.Write(ctx, f, bytes.Join(data, nil), off)
}

// Setattr ignores a new size (O_TRUNC, truncate(2)) and passes the rest through.
func (n *sysNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	in.Valid &^= fuse.FATTR_SIZE
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// errno is the error number a write returns for err.
func errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
