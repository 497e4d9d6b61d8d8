# Scenario of a mixed node: two displays (QEMU's bochs-display, 1234:1111, display class: GPUs to
# the split) each behind its own root port; no host driver is loaded for them. Sourced by init.sh.
D0=$(pci_find 1234 1111 | head -n 1)
D1=$(pci_find 1234 1111 | tail -n 1)
var D0 "$D0"
var D1 "$D1"

# One GPU for VMs: previewed (nothing moves), then applied.
step split-plan /vfio-manager plan --vendor 1234 --vm-gpus 1 --output json
step split-1 /vfio-manager bind --vendor 1234 --vm-gpus 1 --output json
# By index: the first returns to the host, the second goes to vfio.
step split-index /vfio-manager bind --vendor 1234 --vm-gpus index:1 --output json

# A process holding the VM GPU's group keeps it on vfio-pci when the split drops it.
hold_group "$D1"
step split-held /vfio-manager bind --vendor 1234 --vm-gpus 0 --output json
release_group
step split-0 /vfio-manager bind --vendor 1234 --vm-gpus 0 --output json
