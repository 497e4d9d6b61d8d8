// Package vgpuconfig is the vGPU device manager's config in NVIDIA
// vgpu-device-manager's format: the format, its strict parser and its
// errors, the built-in default config and the catalog of NVIDIA's vGPU
// types it is generated from. It is a leaf: it reads no host and links no
// part of the manager, so the operator, which puts the default config in a
// ConfigMap, imports it and never vgpu (internal/archtest keeps it so).
package vgpuconfig
