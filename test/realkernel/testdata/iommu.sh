# Scenario with an IOMMU: one edu (1234:11e8) and one e1000e (8086:10d3), each behind its own
# root port (own IOMMU group). Sourced by init.sh.
NIC=$(pci_find 8086 10d3)
IF=$(ls "/sys/bus/pci/devices/$NIC/net")
var NIC "$NIC"
var IF "$IF"

step status-edu /vfio-manager status --vendor 1234 --output json
step status-nic /vfio-manager status --vendor 8086 --output json

# Round trip of the edu, selected by vendor.
step edu-bind /vfio-manager bind --vendor 1234 --all --output json
step edu-unbind /vfio-manager unbind --vendor 1234 --all --output json

# An e1000e whose interface is up is in use.
ip link set "$IF" up
step nic-up-bind /vfio-manager bind --vendor 8086 --device "$NIC" --output json
ip link set "$IF" down

# Round trip of the e1000e (--vendor 8086 --all would take the q35 chipset too).
step nic-bind /vfio-manager bind --vendor 8086 --device "$NIC" --output json
step nic-unbind /vfio-manager unbind --vendor 8086 --device "$NIC" --output json

# A process holding /dev/vfio/<group> open keeps the edu on vfio-pci.
step held-bind /vfio-manager bind --vendor 1234 --all --output json
hold_group "$(pci_find 1234 11e8)"
step held-unbind /vfio-manager unbind --vendor 1234 --all --output json
release_group
step released-unbind /vfio-manager unbind --vendor 1234 --all --output json
