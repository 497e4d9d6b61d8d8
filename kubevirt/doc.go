// Package kubevirt will hold the KubeVirt device plugin (nvidia.com/<NAME>
// passthrough and vGPU resources), built on the vfio/host model.
// Tracked by the device-plugin issue; nothing is implemented here yet.
package kubevirt
