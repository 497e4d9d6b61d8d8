package vgpu

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/hostlock"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

func release(t testing.TB, h *host.Host, o Options, ao ApplyOptions) *Result {
	t.Helper()
	p, err := PlanRelease(context.Background(), h, o)
	require.NoError(t, err)
	return Apply(context.Background(), h, p, ao)
}

// numVFs is each GPU's enabled VF count.
func numVFs(t testing.TB, h *host.Host) map[host.Address]int {
	t.Helper()
	gpus, err := Inventory(h, nil)
	require.NoError(t, err)
	out := map[host.Address]int{}
	for _, g := range gpus {
		out[g.Address] = len(g.VFs)
	}
	return out
}

// TestReleaseRemovesEveryVGPUAndDisablesVFs: on every vGPU fixture, a
// release removes every vGPU and disables the VFs (sriov_numvfs 0), so
// the GPU can be passed through again; a second release writes nothing.
func TestReleaseRemovesEveryVGPUAndDisablesVFs(t *testing.T) {
	cfg := parse(t, testConfig)
	for _, fx := range []string{"t4-vgpu", "a100-sriov-vgpu", "l40s-vgpu"} {
		k, h := fixture(t, fx)
		require.True(t, apply(t, h, cfg, "default", Options{}, ApplyOptions{}).OK(), fx)
		res := release(t, h, Options{}, ApplyOptions{})
		require.True(t, res.OK(), "%s: %v", fx, res.Refused)
		for a, n := range countsOf(t, h) {
			assert.Empty(t, n, "%s: %s holds no vGPU", fx, a)
		}
		for a, n := range numVFs(t, h) {
			assert.Zero(t, n, "%s: %s has no VF", fx, a)
		}
		k.ResetWrites()
		require.True(t, release(t, h, Options{}, ApplyOptions{}).OK())
		assert.Empty(t, k.Writes(), "%s: a released node costs no write", fx)
		assert.Empty(t, k.Violations(), fx)
	}
}

// TestReleaseNeverTouchesAVGPUInUse: a VM holding one vGPU of an L40S, or
// a pod the kubelet allocated a vGPU of the other, keeps that GPU exactly
// as it is (its vGPUs and VFs), with the reason; the released GPU's VFs go.
func TestReleaseNeverTouchesAVGPUInUse(t *testing.T) {
	k, h, _, _ := heldL40SVF(t)
	res := release(t, h, Options{}, ApplyOptions{})
	requireHeldGPUUntouched(t, k, h, res)
	assert.Equal(t, host.Address("0000:41:00.0"), res.Refused[0].Address)
	assert.Equal(t, 32, numVFs(t, h)["0000:41:00.0"])
	assert.Zero(t, numVFs(t, h)["0000:c1:00.0"])

	// Allocated to a pod, not opened: the same.
	require.NoError(t, k.Exit(5002))
	alloc := AllocatedFunc(func(context.Context) (map[string]string, error) {
		return map[string]string{normID("0000:41:00.4"): "vms/virt-launcher-a compute (nvidia.com/NVIDIA_L40S-24Q)"}, nil
	})
	res = release(t, h, Options{Allocated: alloc}, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "vms/virt-launcher-a")
	assert.Equal(t, map[string]int{"L40S-24Q": 2}, countsOf(t, h)["0000:41:00.0"])

	require.True(t, release(t, h, Options{}, ApplyOptions{}).OK(), "free again")
	assert.Zero(t, numVFs(t, h)["0000:41:00.0"])
	assert.Empty(t, k.Violations())
}

// TestReleaseCrashAfterEveryWrite: a release killed after any single
// write converges when run again, with nothing left and no violation.
func TestReleaseCrashAfterEveryWrite(t *testing.T) {
	cfg := parse(t, testConfig)
	for _, fx := range []string{"t4-vgpu", "a100-sriov-vgpu", "l40s-vgpu"} {
		prepare := func() (*hostsim.Kernel, *host.Host) {
			k, h := fixture(t, fx)
			require.True(t, apply(t, h, cfg, "small", Options{}, ApplyOptions{}).OK())
			k.ResetWrites()
			return k, h
		}
		k, h := prepare()
		require.True(t, release(t, h, Options{}, ApplyOptions{Sequential: true}).OK())
		total := len(k.Writes())
		require.NotZero(t, total)
		for n := 1; n < total; n++ {
			k, h := prepare()
			k.CrashAfter(n)
			require.False(t, release(t, h, Options{}, ApplyOptions{Sequential: true}).OK(), "%s: crash at write %d", fx, n)
			k.CrashAfter(0)
			res := release(t, h, Options{}, ApplyOptions{})
			require.True(t, res.OK(), "%s: re-run after a crash at write %d/%d: %v", fx, n, total, res.Refused)
			for a, c := range countsOf(t, h) {
				assert.Empty(t, c, "%s crash %d: %s", fx, n, a)
			}
			for a, c := range numVFs(t, h) {
				assert.Zero(t, c, "%s crash %d: %s", fx, n, a)
			}
			assert.Empty(t, k.Violations(), "%s crash %d", fx, n)
		}
	}
}

// TestRunRelease: run --release on a node whose A10 holds vGPUs of the
// config it leaves: a VM holding one keeps the node's release refused
// (a Warning event naming the VM, the Node's report with the reason,
// not ready); once the VM exits every vGPU goes (a Normal event, the
// report done). The state label of the config is never written, the
// ready file of the config being left is removed, and the release holds
// the host lock while it runs.
func TestRunRelease(t *testing.T) {
	cs, err := kubernetes.NewForConfig(restConfig(t))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := "vgpu-release"
	_, err = cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels: map[string]string{names.VGPUConfigStateLabel: StateSuccess}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	k, h := fixture(t, "a10-vgpu")
	require.True(t, apply(t, h, parse(t, testConfig), "small", Options{NodeName: node}, ApplyOptions{}).OK())
	m, ok, err := h.ReadMdev(StableUUID(node, "0000:3b:00.0", 2))
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, k.HoldOpen(6100, "qemu-kvm", "vfio/"+strconv.Itoa(m.IOMMUGroup)))
	runDir := t.TempDir()
	ready := filepath.Join(runDir, names.VGPUReadyFile)
	require.NoError(t, os.WriteFile(ready, []byte(`{"config":"small","state":"success"}`), 0o644))
	lock := filepath.Join(runDir, names.VGPULockFile)
	var mu sync.Mutex
	var last wire.VGPUReady
	observe := func(r wire.VGPUReady) {
		mu.Lock()
		defer mu.Unlock()
		last = r
	}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunOptions{Client: cs, NodeName: node, Host: h, RunDir: runDir, Release: true, LockFile: lock,
			Resync: time.Hour, Retry: 100 * time.Millisecond, Log: logr.Discard(), Observe: observe})
	}()
	f := &runFixture{cs: cs, node: node, k: k, h: h}
	report := func() wire.ReleaseReport {
		r, err := wire.ParseReleaseReport(f.get(t).Annotations[names.ReleaseReportAnnotation(names.VGPUDeviceManager)])
		if err != nil {
			return wire.ReleaseReport{}
		}
		return r
	}
	f.waitEvent(t, EventReleaseRefused, "qemu-kvm")
	testutil.Eventually(t, waitFor, "the refusal on the Node", func() bool {
		r := report()
		return !r.Done && len(r.Left) == 1 && r.Left[0] == "0000:3b:00.0 (6 vGPUs, 32 VFs)"
	})
	assert.Contains(t, report().Reason, "0000:3b:00.0: in use")
	mu.Lock()
	r := last
	mu.Unlock()
	assert.Equal(t, StateFailed, r.State)
	assert.True(t, r.Release)
	assert.Equal(t, map[string]int{"NVIDIA A10-4Q": 6}, k.VGPUCounts("0000:3b:00.0"), "the held GPU keeps every vGPU")
	_, err = os.Stat(ready)
	assert.True(t, errors.Is(err, fs.ErrNotExist), "the left config's ready file is removed")
	lctx, lcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = hostlock.Acquire(lctx, lock)
	lcancel()
	require.Error(t, err, "the release holds the host lock")

	require.NoError(t, k.Exit(6100))
	testutil.Eventually(t, waitFor, "released", func() bool { return report().Done })
	f.waitEvent(t, EventReleased, "every vGPU removed")
	assert.Empty(t, k.VGPUCounts("0000:3b:00.0"))
	assert.Equal(t, StateSuccess, f.get(t).Labels[names.VGPUConfigStateLabel], "the state label is the operator's to remove")
	assert.Empty(t, k.Violations())
	cancel()
	require.NoError(t, <-done)
	unlock, err := hostlock.Acquire(context.Background(), lock)
	require.NoError(t, err, "the lock is free once the release stops")
	unlock()
}
