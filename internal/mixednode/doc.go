// Package mixednode holds tests only: a mixed node (some GPUs on vfio for
// VMs, the rest on the nvidia driver for containers) on a simulated host,
// seen by each part that must agree on the split: the VFIO manager that
// makes it, the KubeVirt device plugin that advertises the VM GPUs, and
// the NRI plugin's GPU discovery (nri/gpucdi) that gives containers the
// others.
package mixednode
