// Package wire is what crosses between the node's processes: one type for
// each run file a daemon writes for others to read, with its reader and
// writer, so that a writer and its readers can never disagree on a key and
// no reader links the writer's package (a device plugin or the validator
// never imports vfio or vgpu to read one file).
//
// The run files, each in its writer's folder (names.RunPath):
//
//	vfio-manager.ready                    VFIOReady            vfio-manager daemon -> device plugins, validator
//	vgpu-device-manager.ready             VGPUReady            vgpu-device-manager run -> validator, KubeVirt plugin
//	vgpu-device-manager.pause             VGPUPause            vgpu-device-manager -> KubeVirt plugin
//	vgpu-types.json                       VGPUTypeNames        vgpu-device-manager -> itself, restarted
//	kubevirt-permitted-host-devices.json  Write/ReadPermitted  KubeVirt plugin -> validator
//
// The Node annotation payloads (annotations.go; each written by its daemon
// through internal/ownnode, read by the operator):
//
//	release-report.<operand>  ReleaseReport  a release daemon -> operator
//	vm-gpus-report            SplitReport    vfio-manager daemon (mixed node) -> operator
//	kubevirt-permitted-host-devices  Encode/ParsePermitted  validator -> operator
//
// Every run-file reader goes through internal/atomicfile (a regular file only, at
// most atomicfile.MaxSize bytes, never through a link, never blocking on a
// FIFO) and every writer replaces its file atomically, writing nothing when
// the content is unchanged. wire links only the standard library,
// internal/atomicfile and internal/names (internal/archtest keeps it so).
package wire
