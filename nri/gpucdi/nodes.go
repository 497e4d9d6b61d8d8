package gpucdi

import (
	"fmt"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// nvidiaMajor is the fixed major of /dev/nvidia<N>, nvidiactl and
// nvidia-modeset (NV_MAJOR_DEVICE_NUMBER).
const nvidiaMajor = 195

// hostDevices is what a spec needs of the host's /dev and /proc. Package
// host's model (*host.Host over the DevRoot and ProcRoot of Options) is
// the one implementation: gpucdi reads neither itself.
type hostDevices interface {
	DevNode(name string) (host.DevNode, error)
	CharMajors() (map[string]int64, error)
	MIGCaps() (*host.MIGCaps, error)
}

// hostModel is the host model over o's roots (after withDefaults).
func hostModel(o Options) hostDevices {
	return host.New(host.Options{DevRoot: o.DevRoot, ProcRoot: o.ProcRoot})
}

// devNode is the device node /dev/<name> of the container, at hostPath
// <dev>/<name>. Its numbers come from the node when it is a character
// device, else from major (when known, > 0) and minor.
func devNode(h hostDevices, name string, major, minor int64) (*cdispec.DeviceNode, error) {
	d, err := h.DevNode(name)
	if err != nil {
		return nil, fmt.Errorf("CDI device node /dev/%s: %w", name, err)
	}
	return nodeOf(d, name, major, minor), nil
}

// nodeOf is devNode of a node already read.
func nodeOf(d host.DevNode, name string, major, minor int64) *cdispec.DeviceNode {
	n := &cdispec.DeviceNode{Path: "/dev/" + name, HostPath: d.Path}
	switch {
	case d.Char:
		n.Type, n.Major, n.Minor = "c", d.Major, d.Minor
	case major > 0:
		n.Type, n.Major, n.Minor = "c", major, minor
	}
	return n
}

// roMount bind-mounts host read-only at container, nvidia-ctk's options.
func roMount(host, container string) *cdispec.Mount {
	return &cdispec.Mount{
		HostPath: host, ContainerPath: container,
		Options: []string{"ro", "nosuid", "nodev", "rbind", "rprivate"},
	}
}
