// Package realkernel proves the product against a real Linux kernel: its tests boot the Debian
// kernel under QEMU (TCG) with an emulated Intel IOMMU, run static binaries as part of a busybox
// initramfs, and check what the kernel ended up doing.
//
// TestRealKernel runs the static vfio-manager in its guests, built as the image builds it. Its
// modules guests load no module at boot and have no modprobe or insmod on PATH: vfio-manager
// loads vfio_pci and what it needs from /lib/modules/<release> itself, as Debian ships the
// modules (.ko) and compressed (.ko.xz, indexed by depmod) as newer distributions do. TestRealKernelVGPU runs the guest
// tests of package guest (one static test binary) against the kernel's mtty sample mdev driver
// and QEMU's SR-IOV NVMe controller: package vgpu's own create, remove, enable-vfs and
// disable-vfs steps (vgpu.Step.Apply) over the host model, with the in-use check before every
// write that would block under a held device, and its whole pass (vgpu.PlanConfig, then
// vgpu.Apply) with the inventory taking mtty and the NVMe controller as GPUs
// (vgpu.Options.Parents): create, a second pass with no write, a change refused whole while a
// vGPU it removes is held and applied after, and VFs enabled through the plan.
//
// The kernel, its modules, the mtty driver built for it, QEMU and busybox come from
// hack/fetch-kernel.sh; without them the tests fail naming it (testutil.MissingPeer).
// SANDBOX_GPU_KERNEL_DIR overrides where the kernel is looked for (default <repo>/.cache/kernel)
// and SANDBOX_GPU_VFIO_MANAGER runs a prebuilt static binary (or a busybox shell script, to check
// the harness itself) instead of building ./cmd/vfio-manager.
package realkernel
