// Package gpucdi writes a CDI spec for the NVIDIA GPUs of a container node
// that lacks the one nvidia-ctk generates, so that ordinary containers can
// be given GPUs by CDI device name ("nvidia.com/gpu=0", "=GPU-<uuid>",
// "=0:1", "=MIG-<uuid>", "=all").
//
// The inventory (driver version; GPUs by index, minor and UUID; MIG devices
// by GPU instance, compute instance and UUID) comes from NVML through an
// nvml.Interface the caller passes: the real library on a node (OpenNVML),
// go-nvml's mock in tests. Everything else is read from injected roots,
// each by one reader:
//
//   - DevRoot (default /dev), through package host's model (DevNode):
//     device nodes. A node at <DevRoot>/nvidia0 is written with hostPath
//     <DevRoot>/nvidia0 and path /dev/nvidia0.
//   - ProcRoot (default /proc), through package host's model (CharMajors,
//     MIGCaps): majors of dynamically numbered devices (devices) and MIG
//     capability minors (driver/nvidia-caps/mig-minors, as nvidia-ctk and
//     go-nvlib read them, falling back to the DeviceFileMinor line of
//     driver/nvidia/capabilities/gpu<minor>/mig/gi<gi>[/ci<ci>]/access, as
//     libnvidia-container reads them).
//   - DriverRoot (default /; /run/nvidia/driver for a containerized driver),
//     through this package's driver-root reader (driverroot.go), the only
//     files gpucdi reads itself: libraries and binaries. A file at
//     <DriverRoot>/usr/bin/nvidia-smi is mounted from there at
//     /usr/bin/nvidia-smi. Symlinks are resolved inside the root, absolute
//     ones included.
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
//   - every driver library found in the library folders (Options.LibDirs;
//     by default the multiarch folders /usr/lib/<arch>-linux-gnu and
//     /lib/<arch>-linux-gnu with /usr/lib/<arch>-linux-gnu/nvidia/current,
//     and /usr/lib64, /usr/lib64/nvidia, /lib64) is bind-mounted read-only
//     at the same path in the container. A driver library is a file named
//     lib*.so.<driver version>, or libnvidia-nvvm70.so.* (the legacy NVVM
//     library, libnvidia-nvvm70.so.4 without the driver version since
//     R575);
//   - every entry of those folders that resolves to one of those libraries,
//     in whichever folder (the SONAME link libcuda.so.1, the development
//     link libcuda.so, Debian's alternatives link
//     /usr/lib/x86_64-linux-gnu/libcuda.so.1 into nvidia/current), is
//     mounted too, as a file: the real library mounted at the link's path;
//   - each of these libraries and links is mounted a second time, under its
//     own name, in /usr/local/nvidia/lib64 (ContainerLibDir; the first
//     folder's file wins where two folders have the same name).
//
// No ld.so.cache entry is made (no ldconfig runs), so a program finds
// libcuda.so.1 only where its loader looks without the cache:
//
//   - images that have /usr/local/nvidia/lib64 in LD_LIBRARY_PATH: the
//     nvidia/cuda images and those built on them, whatever the host's
//     distribution. (Their /etc/ld.so.conf.d/nvidia.conf names the folder
//     too, but that acts only when ldconfig runs in the container.)
//   - images whose loader searches the host's library folder by default:
//     Debian and Ubuntu images (whose glibc searches only
//     /lib/<arch>-linux-gnu, /usr/lib/<arch>-linux-gnu, /lib and /usr/lib)
//     on hosts with the driver in /usr/lib/<arch>-linux-gnu (Debian's
//     nvidia/current included: its links are there); RHEL, Fedora, SUSE and
//     other images whose loader searches /lib64 and /usr/lib64 on hosts
//     with the driver in /usr/lib64 or /lib64.
//
// Every other image, a Debian or Ubuntu image on a host whose driver lives
// in /usr/lib64 (RHEL, say) or a /usr/lib64 image on a Debian-family host,
// needs LD_LIBRARY_PATH=/usr/local/nvidia/lib64 in the pod's environment.
//
// # Device nodes
//
// Every container given a device gets /dev/nvidiactl (195:255) and, when
// <ProcRoot>/devices lists nvidia-uvm, /dev/nvidia-uvm and
// /dev/nvidia-uvm-tools (minors 0 and 1 of that major), whether or not the
// nodes exist yet under DevRoot: the host makes the uvm nodes lazily, on
// the first CUDA use after boot. /dev/nvidia-modeset is passed on only when
// it exists. Nodes carry their type, major and minor (from the node when it
// is a character device, else the driver's fixed major 195 or the major
// listed in <ProcRoot>/devices), so for an ordinary pod the runtime makes
// the node in the container and needs nothing at the host path.
//
// A pod in a user namespace (hostUsers: false) is different: runc cannot
// make device nodes there and bind-mounts each one from the host's
// /dev/<path> (the node's container path, not its hostPath). There DevRoot
// must be the host's /dev and the nodes must exist before the container
// starts (nvidia-modprobe -u -c=0 makes the uvm ones).
//
// NVIDIA_VISIBLE_DEVICES=void is set so that an image's own NVIDIA hook, if
// any, does nothing.
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
