# Scenario of the SR-IOV guest: QEMU's NVMe controller with two VFs behind its own root port,
# nvme and vfio-pci loaded. The guest tests (package guest) make the assertions. Sourced by
# init.sh.
step guest-tests /guest.test -test.v -test.run '^(TestPlanSRIOV|TestSRIOV)$' -test.timeout 2m
