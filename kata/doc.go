// Package kata will hold the Kata Containers sandbox device plugin
// (nvidia.com/pgpu plus a CDI spec), built on the vfio/host model.
// Tracked by the device-plugin issue; nothing is implemented here yet.
package kata
