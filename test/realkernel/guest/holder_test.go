//go:build realkernelguest

package guest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The holder is this test binary started again with these variables: it takes the device the
// way QEMU does and holds it until its standard input closes.
const (
	holdGroupEnv  = "REALKERNEL_HOLD_GROUP"  // the IOMMU group number
	holdDeviceEnv = "REALKERNEL_HOLD_DEVICE" // the device's name in the group: an mdev UUID or a PCI address
	holdOnlyEnv   = "REALKERNEL_HOLD_ONLY"   // "device": close the group and container fds once the device fd is open
)

// holdMode is what the holder keeps open.
type holdMode int

const (
	// holdAsQEMU keeps the container, group and device fds open, as QEMU does.
	holdAsQEMU holdMode = iota
	// holdDeviceOnly keeps only the device fd: the group stays in use (the device fd holds a
	// reference to it) though no process has /dev/vfio/<group> among its open files.
	holdDeviceOnly
)

// VFIO ioctls (linux/vfio.h): _IO(VFIO_TYPE ';', VFIO_BASE 100 + n).
const (
	vfioAPIVersion         = 0
	vfioIoctlType          = 0x3b
	vfioGetAPIVersion      = vfioIoctlType<<8 | 100
	vfioCheckExtension     = vfioIoctlType<<8 | 101
	vfioSetIOMMU           = vfioIoctlType<<8 | 102
	vfioGroupGetStatus     = vfioIoctlType<<8 | 103
	vfioGroupSetContainer  = vfioIoctlType<<8 | 104
	vfioGroupGetDeviceFD   = vfioIoctlType<<8 | 106
	vfioType1IOMMU         = 1
	vfioType1v2IOMMU       = 3
	vfioGroupFlagsViable   = 1 << 0
	vfioGroupStatusArgsize = 8
)

// holdDevice opens the container and the group, attaches them, selects the type 1 IOMMU and
// gets the device's fd: what QEMU does before a VM uses the device. With deviceOnly it then
// closes the group and container fds; the rest stay open.
func holdDevice(group, device string, deviceOnly bool) (deviceFD int, err error) {
	container, err := unix.Open("/dev/vfio/vfio", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/vfio/vfio: %w", err)
	}
	if v, err := ioctl(container, vfioGetAPIVersion, 0); err != nil || v != vfioAPIVersion {
		return -1, fmt.Errorf("/dev/vfio/vfio: VFIO_GET_API_VERSION %d: %v", v, err)
	}
	node := "/dev/vfio/" + group
	g, err := unix.Open(node, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", node, err)
	}
	status := [2]uint32{vfioGroupStatusArgsize, 0}
	if _, err := ioctl(g, vfioGroupGetStatus, uintptr(unsafe.Pointer(&status))); err != nil {
		return -1, fmt.Errorf("%s: VFIO_GROUP_GET_STATUS: %w", node, err)
	}
	if status[1]&vfioGroupFlagsViable == 0 {
		return -1, fmt.Errorf("%s: group not viable (a member is on a driver other than vfio)", node)
	}
	if err := unix.IoctlSetPointerInt(g, vfioGroupSetContainer, container); err != nil {
		return -1, fmt.Errorf("%s: VFIO_GROUP_SET_CONTAINER: %w", node, err)
	}
	iommu := uintptr(vfioType1v2IOMMU)
	if ok, _ := ioctl(container, vfioCheckExtension, iommu); ok <= 0 {
		iommu = vfioType1IOMMU
	}
	if _, err := ioctl(container, vfioSetIOMMU, iommu); err != nil {
		return -1, fmt.Errorf("/dev/vfio/vfio: VFIO_SET_IOMMU %d: %w", iommu, err)
	}
	name, err := unix.BytePtrFromString(device)
	if err != nil {
		return -1, err
	}
	fd, err := ioctl(g, vfioGroupGetDeviceFD, uintptr(unsafe.Pointer(name)))
	if err != nil {
		return -1, fmt.Errorf("%s: VFIO_GROUP_GET_DEVICE_FD %s: %w", node, device, err)
	}
	if deviceOnly {
		if err := errors.Join(unix.Close(g), unix.Close(container)); err != nil {
			return -1, fmt.Errorf("%s: close the group and container: %w", node, err)
		}
	}
	return fd, nil
}

func ioctl(fd int, req, arg uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// holdMain is the holder process: it prints "held <fd>" once it holds the device (or "error:
// ..." and exits 1), then waits for its standard input to close.
func holdMain(group, device string) int {
	fd, err := holdDevice(group, device, os.Getenv(holdOnlyEnv) == "device")
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 1
	}
	fmt.Printf("held %d\n", fd)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// holder is a running holder process.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
	pid   int
}

// startHolder starts a holder of device in group and waits until it holds it. The test fails
// when it cannot; the holder is killed at the end of the test if it is still there.
func startHolder(t *testing.T, group int, device string, mode holdMode) *holder {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("find the test binary: %v", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", holdGroupEnv, group), holdDeviceEnv+"="+device)
	if mode == holdDeviceOnly {
		cmd.Env = append(cmd.Env, holdOnlyEnv+"=device")
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a holder of %s: %v", device, err)
	}
	h := &holder{cmd: cmd, stdin: stdin, done: make(chan error, 1), pid: cmd.Process.Pid}
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		first <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
		h.done <- cmd.Wait()
	}()
	t.Cleanup(func() { h.kill() })
	select {
	case line := <-first:
		if !strings.HasPrefix(line, "held ") {
			t.Fatalf("holder of %s in group %d: %q", device, group, line)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("holder of %s in group %d: no answer within 30s", device, group)
	}
	return h
}

// release closes the holder's standard input and waits for it to exit.
func (h *holder) release(t *testing.T) {
	t.Helper()
	h.stdin.Close()
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Fatalf("holder pid %d: %v", h.pid, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("holder pid %d did not exit within 30s of its release", h.pid)
	}
}

func (h *holder) kill() {
	select {
	case err := <-h.done:
		h.done <- err
	default:
		_ = h.cmd.Process.Kill()
		<-h.done
	}
}
