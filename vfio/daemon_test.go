package vfio

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, cond)
}

func readReady(dir string) (*wire.VFIOReady, bool) {
	r, err := wire.ReadVFIOReady(filepath.Join(dir, names.VFIOReadyFile))
	return r, err == nil
}

func refusedFor(r *wire.VFIOReady, a host.Address) string {
	for _, x := range r.Refused {
		if x.Address == string(a) {
			return x.Reason
		}
	}
	return ""
}

type runningDaemon struct {
	d      *Daemon
	cancel context.CancelFunc
	done   chan error
}

func startDaemon(t *testing.T, h *host.Host, cfg, readyDir string) *runningDaemon {
	t.Helper()
	return runDaemon(t, DaemonOptions{Host: h, ConfigFile: cfg, ReadyDir: readyDir, Resync: time.Hour, Log: logr.Discard()})
}

// runDaemon runs a daemon of o until stop or the end of the test.
func runDaemon(t *testing.T, o DaemonOptions) *runningDaemon {
	t.Helper()
	d, err := NewDaemon(o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rd := &runningDaemon{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { rd.done <- d.Run(ctx) }()
	t.Cleanup(cancel)
	return rd
}

func (rd *runningDaemon) stop(t *testing.T) {
	t.Helper()
	rd.cancel()
	select {
	case err := <-rd.done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not stop")
	}
}

func TestDaemonHoldsDesiredStateAndNeverUnbindsInUse(t *testing.T) {
	k, h := buildFixture(t, "gpu-in-use")
	dir := t.TempDir()
	cfg, ready := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "ready")
	require.NoError(t, os.Mkdir(ready, 0o755))
	require.NoError(t, os.WriteFile(cfg, []byte("all: true\n"), 0o644))

	rd := startDaemon(t, h, cfg, ready)
	var rep *wire.VFIOReady
	eventually(t, "readiness file", func() (ok bool) { rep, ok = readReady(ready); return ok })
	assert.Equal(t, []string{"0000:af:00.0"}, rep.VFIO)
	assert.Contains(t, refusedFor(rep, "0000:3b:00.0"), "in use", "the busy GPU is reported")
	ok, why := rep.Judge(time.Now())
	assert.False(t, ok, "a refusal is not ready")
	assert.Contains(t, why, "0000:3b:00.0: in use")
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"), "the busy GPU stays on its driver")
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:af:00.0"))

	// A VM holds the idle GPU's group; asking for it back must not unbind it.
	require.NoError(t, k.HoldOpen(900, "virt-launcher", "vfio/60"))
	require.NoError(t, os.WriteFile(cfg, []byte("all: true\nhost: [\"0000:af:00.0\"]\n"), 0o644))
	eventually(t, "refusal of the held group", func() bool {
		r, ok := readReady(ready)
		return ok && strings.Contains(refusedFor(r, "0000:af:00.0"), "virt-launcher")
	})
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:af:00.0"))

	// The VM goes; the next change returns the GPU to the host.
	require.NoError(t, k.Exit(900))
	require.NoError(t, os.WriteFile(cfg, []byte("all: true\nhost:\n- 0000:af:00.0\n"), 0o644))
	eventually(t, "GPU back on nvidia", func() bool { return k.DriverOf("0000:af:00.0") == "nvidia" })

	before := drivers(k)
	rd.stop(t)
	_, ok = readReady(ready)
	assert.False(t, ok, "readiness file removed on shutdown")
	assert.Equal(t, before, drivers(k), "shutdown moves nothing")
	assert.Empty(t, k.Violations())

	// A restart (upgrade) with the same config writes nothing.
	k.ResetWrites()
	rd = startDaemon(t, h, cfg, ready)
	eventually(t, "readiness after restart", func() bool { _, ok := readReady(ready); return ok })
	rd.stop(t)
	assert.Empty(t, k.Writes(), "restart with an unchanged desired state writes nothing")
}

func TestDaemonRestartKeepsVMsRunning(t *testing.T) {
	k, h := buildFixture(t, "hgx-h100")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("all: true\nnvswitches: true\n"), 0o644))
	rd := startDaemon(t, h, cfg, dir)
	eventually(t, "ready", func() bool { r, ok := readReady(dir); return ok && len(r.VFIO) == 12 })
	rd.stop(t)
	require.NoError(t, k.HoldOpen(901, "qemu-kvm", "vfio/20"))
	k.ResetWrites()
	rd = startDaemon(t, h, cfg, dir)
	eventually(t, "ready again", func() bool { r, ok := readReady(dir); return ok && len(r.VFIO) == 12 })
	rd.stop(t)
	assert.Empty(t, k.Writes())
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:18:00.0"))
}

func TestDaemonBadConfigIsNotReady(t *testing.T) {
	_, h := buildFixture(t, "a10")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("devices: [\"../../x\"]\n"), 0o644))
	d, err := NewDaemon(DaemonOptions{Host: h, ConfigFile: cfg, ReadyDir: dir, Log: logr.Discard()})
	require.NoError(t, err)
	_, err = d.Reconcile(context.Background())
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), cfg)
	assert.Contains(t, err.Error(), "../../x")
	rep, ok := readReady(dir)
	require.True(t, ok, "the file says why it is not ready")
	ready, why := rep.Judge(time.Now())
	assert.False(t, ready)
	assert.Contains(t, why, "../../x")
	assert.False(t, wire.VFIOIsReady(filepath.Join(dir, names.VFIOReadyFile)))
}

func TestDaemonReadinessAndMetrics(t *testing.T) {
	_, h := buildFixture(t, "a10")
	reg := prometheus.NewRegistry()
	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, Log: logr.Discard(), Registerer: reg})
	require.NoError(t, err)
	ok, _ := d.Readiness()
	assert.False(t, ok, "not ready before the first reconcile")
	_, err = d.Reconcile(context.Background())
	require.NoError(t, err)
	ok, detail := d.Readiness()
	assert.True(t, ok)
	assert.Equal(t, []string{"0000:3b:00.0"}, detail.(*ReadyReport).VFIO)
	assert.Equal(t, 1.0, promtest.ToFloat64(d.metrics.ready))
	n, err := promtest.GatherAndCount(reg, "sandbox_gpu_vfio_functions")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, 1.0, promtest.ToFloat64(d.metrics.functions.WithLabelValues("vfio")))
}

func TestDesiredRejectsConflicts(t *testing.T) {
	_, _, err := Desired{Devices: []string{"0000:3b:00.0"}, Host: []string{"3b:00.0"}}.Selections()
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), "0000:3b:00.0")
}

// A config shared by nodes of different shapes names functions this node
// lacks: they are reported, the rest is done, the node is ready.
func TestDaemonReportsMissingDevices(t *testing.T) {
	k, h := buildFixture(t, "a10")
	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{Devices: []string{"0000:3b:00.0", "0000:af:00.0"}}, Log: logr.Discard()})
	require.NoError(t, err)
	rep, err := d.Reconcile(context.Background())
	require.NoError(t, err)
	assert.True(t, rep.Ready)
	assert.Equal(t, []string{"0000:3b:00.0"}, rep.VFIO)
	assert.Contains(t, refusedFor(rep.Wire(), "0000:af:00.0"), "not found")
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:3b:00.0"))
}

// TestReadinessIsHonest: a node with the IOMMU off is not ready and says
// why, in the file and on /readyz; the file carries a heartbeat the daemon
// renews; once the daemon is gone (killed: its file left behind) the file
// reads as not ready.
func TestReadinessIsHonest(t *testing.T) {
	_, h := buildFixture(t, "iommu-off")
	dir := t.TempDir()
	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, ReadyDir: dir, Heartbeat: 20 * time.Millisecond, Log: logr.Discard()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var first *wire.VFIOReady
	eventually(t, "the readiness file", func() (ok bool) { first, ok = readReady(dir); return ok })
	ok, why := first.Judge(time.Now())
	assert.False(t, ok)
	assert.Contains(t, why, "iommu")
	ready, detail := d.Readiness()
	assert.False(t, ready)
	assert.Contains(t, detail.(*ReadyReport).Reason, "iommu")
	eventually(t, "a newer heartbeat", func() bool {
		r, ok := readReady(dir)
		return ok && r.Heartbeat.After(first.Heartbeat) && r.PID == os.Getpid()
	})
	cancel()
	require.NoError(t, <-done)

	// A live daemon's ready file, then the daemon killed: nothing renews it.
	_, h = buildFixture(t, "a10")
	d, err = NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, ReadyDir: dir, Heartbeat: 20 * time.Millisecond, Log: logr.Discard()})
	require.NoError(t, err)
	_, err = d.Reconcile(context.Background())
	require.NoError(t, err)
	path := filepath.Join(dir, names.VFIOReadyFile)
	require.True(t, wire.VFIOIsReady(path), "written just now by a live daemon")
	r, err := wire.ReadVFIOReady(path)
	require.NoError(t, err)
	ok, why = r.Judge(r.Expires.Add(time.Millisecond))
	assert.False(t, ok, "past its expiry the file is a dead daemon's")
	assert.Contains(t, why, "is not running")
	eventually(t, "the file to expire without a daemon", func() bool { return !wire.VFIOIsReady(path) })
}
