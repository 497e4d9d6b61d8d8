package realkernel

import (
	"os"
	"path/filepath"
	"testing"
)

// nvmeSRIOV is QEMU's NVMe controller with two SR-IOV VFs (QEMU 7.2 and later): it needs a
// subsystem and both flexible-resource options, and no drive beside the subsystem.
const nvmeSRIOV = "nvme,serial=sriov0,subsys=subsys0,sriov_max_vfs=2,sriov_vq_flexible=4,sriov_vi_flexible=2"

// TestRealKernelVGPU proves package vgpu's own steps (create, remove, enable-vfs and
// disable-vfs, as vgpu.Apply runs them) and the host model beneath them on a real kernel: mdev
// create, list and remove against the kernel's mtty sample driver, and SR-IOV VF enable and
// disable against QEMU's NVMe controller, each with a process holding a VFIO device the way
// QEMU does. On a real kernel a remove or sriov_numvfs write under a held device blocks the
// writer, unkillably, until the holder exits: the guest tests show that the steps' in-use
// check comes first and that no such write is made. The same guests run the manager's whole
// pass, vgpu.PlanConfig then vgpu.Apply, with mtty and the NVMe controller taken as GPUs
// (TestPlanMtty, TestPlanSRIOV). The assertions run in the guest (package guest); this test
// boots one guest per group and checks their results.
func TestRealKernelVGPU(t *testing.T) {
	t.Parallel()
	env := requireHostEnv(t)
	initScript, err := os.ReadFile(filepath.Join("testdata", "init.sh"))
	if err != nil {
		t.Fatalf("guest init: %v", err)
	}
	guestTests := guestTestBinary(t, env)
	rd := func(modules ...string) initramfs {
		return initramfs{
			busybox: env.busybox, modulesDir: env.modulesDir, release: env.kernelVer,
			modules: requireModules(t, env, modules...), init: string(initScript),
			binaries: map[string]string{"guest.test": guestTests},
		}
	}

	guests := []struct {
		name string
		rd   initramfs
		m    machine
		top  []string // the guest tests the scenario runs
	}{
		// busybox insmod ignores modules.softdep: vfio_iommu_type1 and the crc algorithms
		// nvme's t10-pi asks the crypto API for are named explicitly.
		{"mtty", rd("vfio_iommu_type1", "mdev", "mtty"),
			machine{iommu: true, scenario: "mtty.sh"}, []string{"TestPlanMtty", "TestMtty"}},
		{"sriov-nvme", rd("vfio_iommu_type1", "vfio_pci", "crct10dif_generic", "crc64_rocksoft_generic", "nvme"),
			machine{iommu: true, scenario: "sriov.sh",
				devices: concat([]string{"nvme-subsys,id=subsys0"}, rootPort(1, nvmeSRIOV))}, []string{"TestPlanSRIOV", "TestSRIOV"}},
	}
	for _, g := range guests {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			checkGuestTests(t, boot(t, env, g.rd, g.m), "guest-tests", g.top...)
		})
	}
}
