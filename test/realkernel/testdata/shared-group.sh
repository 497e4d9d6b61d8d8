# Scenario with one edu behind its own root port and one edu plus one e1000e behind a single
# pcie-pci-bridge (one IOMMU group with the bridge). Sourced by init.sh.
var NIC "$(pci_find 8086 10d3)"
step status /vfio-manager status --vendor 1234 --output json
step edu-bind /vfio-manager bind --vendor 1234 --all --output json
