// Package guest holds the tests that run inside the QEMU guests of package realkernel: built
// with the realkernelguest tag into one static test binary (CGO_ENABLED=0 go test -c), put in
// the initramfs and run by a scenario script. They drive package vgpu's own steps and the host
// model (package host) beneath them against the guest's real sysfs, /dev and /proc: mdev
// create, list and remove on the kernel's mtty sample driver, and SR-IOV VF enable and disable
// on QEMU's NVMe controller, each with a process holding a VFIO device the way QEMU does; and
// the manager's whole pass (vgpu.PlanConfig, then vgpu.Apply) with the inventory taking mtty and
// the NVMe controller as GPUs (vgpu.Options.Parents).
//
// Outside a guest the package has no tests: its test files carry the realkernelguest build tag,
// since they write to the machine's sysfs.
package guest
