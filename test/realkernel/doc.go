// Package realkernel proves vfio-manager against a real Linux kernel: its test boots the
// Debian kernel under QEMU (TCG) with an emulated Intel IOMMU, runs the static vfio-manager
// as part of a busybox initramfs, and checks what the kernel ended up doing.
//
// The kernel, QEMU and busybox come from hack/fetch-kernel.sh; without them the test skips.
// SANDBOX_GPU_KERNEL_DIR overrides where the kernel is looked for (default <repo>/.cache/kernel)
// and SANDBOX_GPU_VFIO_MANAGER runs a prebuilt static binary (or a busybox shell script, to check
// the harness itself) instead of building ./cmd/vfio-manager.
package realkernel
