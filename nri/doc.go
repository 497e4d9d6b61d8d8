// Package nri will hold the containerd NRI plugin that injects exactly the
// GPUs the kubelet allocated into ordinary containers.
// Tracked by the NRI issue; nothing is implemented here yet.
package nri
