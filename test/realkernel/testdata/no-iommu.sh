# Scenario without an IOMMU: one e1000e and one edu, each behind its own root port. Sourced
# by init.sh.
NIC=$(pci_find 8086 10d3)
var NIC "$NIC"
step status /vfio-manager status --vendor 8086 --output json
step nic-bind /vfio-manager bind --vendor 8086 --device "$NIC" --output json
step edu-bind /vfio-manager bind --vendor 1234 --all --output json
