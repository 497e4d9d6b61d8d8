// Package host is the host model of sandbox-gpu: the only code that reads
// sysfs, /dev and /proc. Every path is derived from injected roots, so the
// same code runs on a real node and on the simulated kernel of package
// hostsim. Scans never change anything; writes go through a Writer.
//
// One concrete *Host (host.go: Options, New, the roots) holds the methods
// of every subsystem, each in a file named for it (tests in the matching
// _test.go):
//
//   - function.go: PCI functions (Scan, Snapshot, ReadFunction, NoFunction)
//   - iommu.go: IOMMU state and groups
//   - drivers.go: drivers and binding (driver_override, unbind, probe,
//     which driver a function gets, EnsureDriver, DriverStateOf)
//   - modules.go: the kernel release, the modules folder and its aliases;
//     modload.go, moddep.go, modalias.go load modules and parse their
//     indexes
//   - mdev.go: mediated devices (list, types, create, remove, in use)
//   - vgpu.go: SR-IOV VFs and NVIDIA's vendor-specific VFIO vGPU on them
//   - vfiodev.go: /dev/vfio nodes (iommufd, group nodes, claiming a group,
//     the checks and watch folders of device plugins)
//   - usage.go: processes and in-use (ScanUsage, InUse, CheckIdle)
//   - nvidiadev.go: NVIDIA device nodes, majors, MIG capabilities, the
//     driver's per-GPU information and which of NVIDIA's host drivers runs
//   - netlink.go: network links (up or down)
//   - sysfsattr.go, sysfswrite.go: reading and writing sysfs attributes
//
// Consumers do not take *Host: each declares the narrow interface of the
// methods it calls (internal/archtest keeps this holding).
package host
