// Package gpucdi writes a CDI spec for the NVIDIA GPUs of a container node
// that lacks the one nvidia-ctk generates, so that ordinary containers can
// be given GPUs by CDI device name ("nvidia.com/gpu=0", "=GPU-<uuid>",
// "=0:1", "=MIG-<uuid>", "=all").
//
// The inventory (driver version; GPUs by index, minor and UUID; MIG devices
// by GPU instance, compute instance and UUID) comes from NVML through an
// nvml.Interface the caller passes: the real library on a node (OpenNVML),
// go-nvml's mock in tests. Everything else is read from injected roots:
//
//   - DevRoot (default /dev): device nodes. A node at <DevRoot>/nvidia0 is
//     written with hostPath <DevRoot>/nvidia0 and path /dev/nvidia0.
//   - DriverRoot (default /; /run/nvidia/driver for a containerized driver):
//     libraries and binaries. A file at <DriverRoot>/usr/bin/nvidia-smi is
//     mounted from there at /usr/bin/nvidia-smi. Symlinks are resolved
//     inside the root, absolute ones included.
//   - ProcRoot (default /proc): majors of dynamically numbered devices
//     (devices) and MIG capability minors (driver/nvidia-caps/mig-minors,
//     as nvidia-ctk and go-nvlib read them, falling back to the
//     DeviceFileMinor line of driver/nvidia/capabilities/gpu<minor>/mig/
//     gi<gi>[/ci<ci>]/access, as libnvidia-container reads them).
//
// Host paths in the spec are these root-joined paths, so the code that
// generates the spec must see the roots at the paths the container runtime
// sees them (as NVIDIA's toolkit container does).
//
// # No hooks
//
// nvidia-ctk's spec runs createContainer hooks (update-ldcache,
// create-symlinks) that enter the container's bundle; they fail for pods in
// a user namespace (hostUsers: false). This spec has no hooks at all.
// Instead:
//
//   - every driver library lib*.so.<driver version> found in the library
//     folders is bind-mounted read-only at the same path in the container;
//   - every symlink in those folders that resolves to one of them (the
//     SONAME link libcuda.so.1, the development link libcuda.so) is mounted
//     too, as a file: the real library mounted at the link's path. The
//     dynamic loader finds libcuda.so.1 by searching its default folders
//     (/lib64, /usr/lib64 and, on Debian-family images, the multiarch
//     folders such as /usr/lib/x86_64-linux-gnu) without an ld.so.cache
//     entry, so no ldconfig run is needed. An image whose loader does not
//     search the host's library folder (a Debian image on a host whose
//     driver lives in /usr/lib64, say) needs LD_LIBRARY_PATH.
//
// Device nodes carry their type, major and minor (from the node when it is
// a character device, else the driver's fixed major 195 or the major listed
// in <ProcRoot>/devices), so the runtime needs no node at the host path to
// inject them. NVIDIA_VISIBLE_DEVICES=void is set so that an image's own
// NVIDIA hook, if any, does nothing.
//
// # cgo
//
// go-nvml's package nvml does not compile without cgo (its Return type and
// constants live in cgo files), so neither does anything that names
// nvml.Interface, the mock included. The files that import it build only
// with cgo; Build and the file functions are plain Go and remain available
// with CGO_ENABLED=0. A binary that calls Generate or OpenNVML must be built
// with CGO_ENABLED=1, dynamically linked against glibc.
package gpucdi
