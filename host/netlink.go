package host

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// LinkStater tells whether a network interface is administratively up.
type LinkStater interface {
	LinkUp(name string) (bool, error)
}

// NetlinkLinks asks the kernel over netlink, in the current network
// namespace.
type NetlinkLinks struct{}

// LinkUp reports the IFF_UP flag of the named link. A link that sysfs
// shows but this network namespace does not know is an error: its state
// cannot be told (run in the host network namespace).
func (NetlinkLinks) LinkUp(name string) (bool, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return false, fmt.Errorf("network interface %s is not in this network namespace (run with the host network): %w", name, err)
		}
		return false, fmt.Errorf("netlink: link %s: %w", name, err)
	}
	return l.Attrs().Flags&net.FlagUp != 0, nil
}
