package vgpu

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

// removingWrites are the writes that take a vGPU or VF away.
func removingWrites(k *hostsim.Kernel) []string {
	var out []string
	for _, w := range k.Writes() {
		if strings.HasSuffix(w.Path, "/remove") || strings.HasSuffix(w.Path, "/sriov_numvfs") ||
			(strings.HasSuffix(w.Path, "/current_vgpu_type") && strings.TrimSpace(w.Data) == "0") {
			out = append(out, w.Path+"="+w.Data)
		}
	}
	return out
}

func mdevGroup(t *testing.T, h *host.Host, uuid string) string {
	t.Helper()
	m, ok, err := h.ReadMdev(uuid)
	require.NoError(t, err)
	require.True(t, ok, uuid)
	return "vfio/" + strconv.Itoa(m.IOMMUGroup)
}

// TestHeldVGPUIsNeverRemoved: a VM holding one vGPU of GPU 0 makes GPU 0's
// whole change refused ("in use", exit 2) with no write to it at all; the
// other seven GPUs change.
func TestHeldVGPUIsNeverRemoved(t *testing.T) {
	k, h := fixture(t, "t4x8-vgpu")
	cfg := parse(t, `version: v1
vgpu-configs:
  quarter:
    - devices: all
      vgpu-devices: {"T4-4Q": 4}
  half:
    - devices: all
      vgpu-devices: {"T4-8Q": 2}
`)
	require.True(t, apply(t, h, cfg, "quarter", Options{}, ApplyOptions{}).OK())
	held := StableUUID(testNode, "0000:18:00.0", 2)
	require.NoError(t, k.HoldOpen(5000, "qemu-kvm", mdevGroup(t, h, held)))
	before := state(t, h)

	p := planOf(t, h, cfg, "half", Options{})
	refused := p.Refusals()
	require.Len(t, refused, 1)
	assert.Equal(t, 0, refused[0].GPU)
	assert.Contains(t, refused[0].Reason, "in use: ")
	assert.Contains(t, refused[0].Reason, "qemu-kvm")
	assert.Contains(t, refused[0].Reason, held)
	assert.Empty(t, p.GPUs[0].Steps)

	k.ResetWrites()
	res := Apply(t.Context(), h, p, ApplyOptions{})
	assert.Equal(t, ExitRefused, ExitCode(res.Err(), res.Refused))
	assert.Equal(t, ExitRefused, ExitCode(nil, res.Refused))
	for _, w := range k.Writes() {
		assert.NotEqual(t, host.Address("0000:18:00.0"), w.Address, "no write to the refused GPU: %s", w.Path)
	}
	assert.Equal(t, before["0000:18:00.0"], state(t, h)["0000:18:00.0"], "GPU 0 left exactly as it was")
	for addr, c := range countsOf(t, h) {
		if addr != "0000:18:00.0" {
			assert.Equal(t, map[string]int{"T4-8Q": 2}, c, "%s changed", addr)
		}
	}
	assert.Empty(t, k.Violations())
}

// TestInUseCheckedRightBeforeEachRemove: a VM that starts on a vGPU after
// the plan, even after the apply's own pre-check, between two removes, stops
// the GPU before the write that would remove it.
func TestInUseCheckedRightBeforeEachRemove(t *testing.T) {
	cfg := parse(t, testConfig)
	k, h := fixture(t, "a10-vgpu")
	require.True(t, apply(t, h, cfg, "default", Options{}, ApplyOptions{}).OK())
	second := StableUUID(testNode, "0000:3b:00.0", 1)
	node := mdevGroup(t, h, second)
	p := planOf(t, h, cfg, "small", Options{})
	require.Len(t, p.GPUs[0].Steps, 8, "two removes, six creates")

	var grabbed atomic.Bool
	k.SetLatency(func(w hostsim.Write) time.Duration {
		if strings.HasSuffix(w.Path, "/remove") && grabbed.CompareAndSwap(false, true) {
			// The first remove is under way: a VM opens the other vGPU.
			assert.NoError(t, k.HoldOpen(5001, "qemu-kvm", node)) // not require: an apply goroutine
		}
		return 0
	})
	k.ResetWrites()
	res := Apply(t.Context(), h, p, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.True(t, strings.HasPrefix(res.Refused[0].Reason, "in use: "), res.Refused[0].Reason)
	assert.Len(t, removingWrites(k), 1, "only the first remove was written")
	assert.Len(t, k.Writes(), 1, "and nothing was created")
	assert.Empty(t, k.Violations())
	_, ok, err := h.ReadMdev(second)
	require.NoError(t, err)
	assert.True(t, ok, "the held vGPU is still there")
}

// TestAllocatedVGPUIsInUse: a vGPU the kubelet allocated to a pod is in
// use even when no process holds it; a kubelet that cannot answer makes
// every removal unsafe; creations still happen.
func TestAllocatedVGPUIsInUse(t *testing.T) {
	cfg := parse(t, testConfig)
	k, h := fixture(t, "l40s-vgpu")
	require.True(t, apply(t, h, cfg, "default", Options{}, ApplyOptions{}).OK())
	kubelet := nritest.StartPodResources(t, t.TempDir())
	kubelet.Allocate("vms", "win11", "compute", "nvidia.com/NVIDIA_L40S-24Q", "0000:c1:00.5")
	client := podClient(t, kubelet.Socket())
	o := Options{Allocated: PodResourcesAllocated{Pods: client}}

	k.ResetWrites()
	res := apply(t, h, cfg, "small", o, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.Equal(t, host.Address("0000:c1:00.0"), res.Refused[0].Address)
	assert.Contains(t, res.Refused[0].Reason, "in use: 0000:c1:00.5 is allocated to pod vms/win11 container compute (nvidia.com/NVIDIA_L40S-24Q)")
	assert.Equal(t, map[string]int{"L40S-8Q": 4, "L40S-8A": 2}, countsOf(t, h)["0000:41:00.0"], "the other GPU changed")
	for _, w := range k.Writes() {
		assert.NotEqual(t, host.Address("0000:c1:00.5"), w.Address)
		assert.NotContains(t, w.Path, "0000:c1:", "no write to the refused GPU")
	}

	// Allocated after the plan: the apply's checks ask the kubelet again.
	kubelet.Delete("vms", "win11")
	p := planOf(t, h, cfg, "small", o)
	require.Empty(t, p.Refusals())
	kubelet.Allocate("vms", "late", "compute", "nvidia.com/NVIDIA_L40S-24Q", "0000:c1:00.4")
	k.ResetWrites()
	res = Apply(t.Context(), h, p, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "vms/late")
	assert.Empty(t, removingWrites(k))

	var calls atomic.Int32
	broken := AllocatedFunc(func(context.Context) (map[string]string, error) {
		calls.Add(1)
		return nil, errors.New("connection refused")
	})
	res = apply(t, h, cfg, "small", Options{Allocated: broken}, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "in use: cannot tell whether 0000:c1:00.4 is allocated to a pod")
	assert.NotZero(t, calls.Load())
	assert.Empty(t, k.Violations())
}

// TestHeldVFNeverLosesItsVGPU: vendor-specific VFIO: a VM holding a VF's
// /dev/vfio group keeps its vGPU: no current_vgpu_type 0 is written.
func TestHeldVFNeverLosesItsVGPU(t *testing.T) {
	k, h, cfg, group := heldL40SVF(t)
	res := apply(t, h, cfg, "none", Options{}, ApplyOptions{})
	requireHeldGPUUntouched(t, k, h, res)
	assert.Contains(t, res.Refused[0].Reason, "vfio/"+strconv.Itoa(group))
	assert.Equal(t, map[string]int{}, countsOf(t, h)["0000:c1:00.0"])
	assert.Empty(t, k.Violations())
}

// TestPartialVFCount: a hand-written partial VF count is reset (0, then
// all) when no VF holds anything; a VF allocated to a pod stops the reset
// before any sriov_numvfs write.
func TestPartialVFCount(t *testing.T) {
	cfg := parse(t, testConfig)
	for _, allocated := range []bool{false, true} {
		k, h := fixture(t, "a100-sriov-vgpu")
		require.NoError(t, h.SetNumVFs("0000:41:00.0", 4))
		o := Options{}
		if allocated {
			o.Allocated = AllocatedFunc(func(context.Context) (map[string]string, error) {
				return map[string]string{"0000:41:00.6": "vms/x"}, nil
			})
		}
		k.ResetWrites()
		res := apply(t, h, cfg, "default", o, ApplyOptions{})
		if allocated {
			require.Len(t, res.Refused, 1)
			assert.Contains(t, res.Refused[0].Reason, "in use: 0000:41:00.6 is allocated to pod vms/x")
			assert.Empty(t, k.Writes(), "no sriov_numvfs write with a VF in use")
			continue
		}
		require.True(t, res.OK(), "%v", res.Refused)
		assert.Equal(t, []string{"0", "16"}, dataOf(k, "/sriov_numvfs"))
		assert.Equal(t, map[string]int{"A100-10C": 4}, countsOf(t, h)["0000:41:00.0"])
	}
}

func dataOf(k *hostsim.Kernel, suffix string) []string {
	var out []string
	for _, w := range k.Writes() {
		if strings.HasSuffix(w.Path, suffix) {
			out = append(out, strings.TrimSpace(w.Data))
		}
	}
	return out
}

// TestDeviceFDOnlyHolderIsSeen: QEMU may keep only the VFIO device fd and
// close the group fd; /proc/*/fd then does not name the group node (the
// real-kernel suite shows it), but the group stays busy. The claim taken
// before the check sees it: the GPU's change is refused with no removing
// write, which on a real kernel would have blocked unkillably.
func TestDeviceFDOnlyHolderIsSeen(t *testing.T) {
	cfg := parse(t, testConfig)
	k, h := fixture(t, "a10-vgpu")
	require.True(t, apply(t, h, cfg, "default", Options{}, ApplyOptions{}).OK())
	node := mdevGroup(t, h, StableUUID(testNode, "0000:3b:00.0", 1))
	k.HoldDeviceFD(node)
	k.ResetWrites()

	res := apply(t, h, cfg, "small", Options{}, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.True(t, strings.HasPrefix(res.Refused[0].Reason, "in use: "), res.Refused[0].Reason)
	assert.Contains(t, res.Refused[0].Reason, node)
	assert.Empty(t, removingWrites(k), "no remove of a vGPU a VM holds")
	assert.Empty(t, k.Violations())

	k.ReleaseDeviceFD(node)
	assert.True(t, apply(t, h, cfg, "small", Options{}, ApplyOptions{}).OK(), "released: the change goes through")
	assert.Empty(t, k.Violations())
}

// heldL40SVF applies testConfig's default on the l40s-vgpu host and has a
// VM (pid 5002) hold the /dev/vfio group of VF 0000:41:00.5, which has a
// vGPU; the writes are reset. It returns the VF's IOMMU group.
func heldL40SVF(t *testing.T) (*hostsim.Kernel, *host.Host, *vgpuconfig.Config, int) {
	t.Helper()
	cfg := parse(t, testConfig)
	k, h := fixture(t, "l40s-vgpu")
	require.True(t, apply(t, h, cfg, "default", Options{}, ApplyOptions{}).OK())
	f, err := h.ReadFunction("0000:41:00.5")
	require.NoError(t, err)
	require.NoError(t, k.HoldOpen(5002, "qemu-kvm", "vfio/"+strconv.Itoa(f.IOMMUGroup)))
	k.ResetWrites()
	return k, h, cfg, f.IOMMUGroup
}

// requireHeldGPUUntouched: the one refusal is an in-use one, no removing
// write touched the held GPU 0000:41:00.0, and its two vGPUs stay.
func requireHeldGPUUntouched(t *testing.T, k *hostsim.Kernel, h *host.Host, res *Result) {
	t.Helper()
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "in use: ")
	for _, w := range removingWrites(k) {
		assert.NotContains(t, w, "0000:41:", "no removing write on the held GPU")
	}
	assert.Equal(t, map[string]int{"L40S-24Q": 2}, countsOf(t, h)["0000:41:00.0"])
}
