package hostsim

import (
	"fmt"
	"path/filepath"
	"syscall"
)

// Claim implements host.GroupClaimer the way the legacy VFIO group node
// behaves: one opener at a time. The group is busy while a simulated
// process holds the node open (HoldOpen) or holds only a device fd got
// through it (HoldDeviceFD), and while another claim is held.
func (k *Kernel) Claim(node string) (func(), error) {
	node = filepath.Clean(node)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.openFiles()[node] || k.deviceFDs[node] > 0 || k.claims[node] {
		return nil, fmt.Errorf("open %s: %w", node, syscall.EBUSY)
	}
	if k.claims == nil {
		k.claims = map[string]bool{}
	}
	k.claims[node] = true
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		delete(k.claims, node)
	}, nil
}

// HoldDeviceFD makes a simulated VM hold a VFIO device fd got through the
// group node devPath ("vfio/12", relative to the dev root) with the group
// fd itself closed, as QEMU may: no /proc/<pid>/fd entry names the node,
// yet the group stays busy and a remove or sriov_numvfs write would block
// on a real kernel (recorded as a violation here). Release it with
// ReleaseDeviceFD.
func (k *Kernel) HoldDeviceFD(devPath string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.deviceFDs == nil {
		k.deviceFDs = map[string]int{}
	}
	k.deviceFDs[filepath.Join(k.root, "dev", devPath)]++
}

// ReleaseDeviceFD closes a device fd HoldDeviceFD made.
func (k *Kernel) ReleaseDeviceFD(devPath string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := filepath.Join(k.root, "dev", devPath)
	if k.deviceFDs[n] > 1 {
		k.deviceFDs[n]--
		return
	}
	delete(k.deviceFDs, n)
}
