# Scenario of the mdev guest: the kernel's mtty sample driver is loaded (after vfio,
# vfio_iommu_type1 and mdev), no PCI device is needed. The guest tests (package guest) make
# the assertions. Sourced by init.sh.
step guest-tests /guest.test -test.v -test.run '^(TestPlanMtty|TestMtty)$' -test.timeout 2m
