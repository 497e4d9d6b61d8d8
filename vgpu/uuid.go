package vgpu

import (
	"strconv"

	"github.com/google/uuid"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// uuidNamespace is the name-based (SHA-1, RFC 9562 version 5) UUID
// namespace of the vGPUs this manager creates.
const uuidNamespace = "3f0d6c58-6b1e-4a53-9c7e-1d2f6a8b9e40"

// StableUUID is the mdev UUID of a GPU's vGPU slot: the same node name,
// GPU PCI address and slot give the same UUID on every run and after every
// reboot, so a config applied at boot recreates the same set.
func StableUUID(node string, gpu host.Address, slot int) string {
	ns := uuid.MustParse(uuidNamespace)
	return uuid.NewSHA1(ns, []byte(node+"/"+string(gpu)+"/"+strconv.Itoa(slot))).String()
}
