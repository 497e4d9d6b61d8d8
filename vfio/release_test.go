package vfio

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// TestReleaseSelections: release returns every function of the vendor,
// NVSwitches included, and takes none for vfio; with all or devices it is
// bad input.
func TestReleaseSelections(t *testing.T) {
	toVFIO, toHost, err := Desired{Release: true}.Selections()
	require.NoError(t, err)
	assert.Equal(t, Selection{All: true, Vendor: host.VendorNVIDIA, NVSwitches: true}, toHost)
	assert.False(t, toVFIO.All)
	assert.Empty(t, toVFIO.Devices)
	for _, d := range []Desired{{Release: true, All: true}, {Release: true, Devices: []string{"0000:3b:00.0"}}} {
		_, _, err := d.Selections()
		require.ErrorIs(t, err, ErrBadInput, "%+v", d)
	}
	d, err := ParseDesired("release.yaml", []byte("release: true\nvendor: \"10de\"\n"))
	require.NoError(t, err)
	assert.True(t, d.Release)
}

// releaseDaemon runs a release daemon on h with a lock file and the given
// kubelet allocations, collecting what it reports.
type releaseDaemon struct {
	*runningDaemon
	mu      sync.Mutex
	reports []wire.ReleaseReport
}

func startRelease(t *testing.T, h *host.Host, dir string, alloc Allocations) *releaseDaemon {
	t.Helper()
	rd := &releaseDaemon{}
	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{Release: true}, ReadyDir: dir, Resync: 50 * time.Millisecond,
		LockFile: filepath.Join(dir, "vfio.lock"), Allocations: alloc, Log: logr.Discard(),
		OnReport: func(_ context.Context, r *ReadyReport) {
			rd.mu.Lock()
			defer rd.mu.Unlock()
			rd.reports = append(rd.reports, ReleaseReport(r))
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rd.runningDaemon = &runningDaemon{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { rd.done <- d.Run(ctx) }()
	t.Cleanup(cancel)
	return rd
}

func (rd *releaseDaemon) last() (wire.ReleaseReport, bool) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if len(rd.reports) == 0 {
		return wire.ReleaseReport{}, false
	}
	return rd.reports[len(rd.reports)-1], true
}

// TestReleaseReturnsEveryIdleFunction: on an HGX node whose GPUs and
// NVSwitches are on vfio-pci, the release daemon returns all of them to
// nvidia, but not a GPU a VM holds, nor one the kubelet allocated to a pod
// that has not opened it: those keep it not ready, named in the reason and
// in the report's left list. Once they are free it returns them and is
// ready. Stopping it moves nothing.
func TestReleaseReturnsEveryIdleFunction(t *testing.T) {
	k, h := buildFixture(t, "hgx-h100")
	move(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	held, allocated := host.Address("0000:18:00.0"), host.Address("0000:2a:00.0")
	f, err := h.ReadFunction(held)
	require.NoError(t, err)
	require.NoError(t, k.HoldOpen(4242, "qemu-kvm", "vfio/"+itoa(f.IOMMUGroup)))
	var pods sync.Map
	pods.Store("on", true)
	alloc := func(context.Context) (map[string][]podresources.Holder, error) {
		if _, ok := pods.Load("on"); !ok {
			return nil, nil
		}
		return map[string][]podresources.Holder{podresources.NormID(string(allocated)): {{Pod: "vms/virt-launcher-b", Container: "compute", Resource: "nvidia.com/GH100_H100_SXM5_80GB"}}}, nil
	}
	dir := t.TempDir()
	rd := startRelease(t, h, dir, alloc)
	eventually(t, "idle functions back on nvidia", func() bool {
		for _, a := range k.Addresses() {
			if a != held && a != allocated && strings.HasPrefix(k.DriverOf(a), "vfio") {
				return false
			}
		}
		return true
	})
	var rep wire.ReleaseReport
	eventually(t, "a report naming both", func() (ok bool) {
		rep, ok = rd.last()
		return ok && len(rep.Left) == 2
	})
	assert.False(t, rep.Done)
	assert.Equal(t, []string{string(held), string(allocated)}, rep.Left)
	assert.Contains(t, rep.Reason, "held by pid 4242 (qemu-kvm)")
	assert.Contains(t, rep.Reason, "allocated as 0000:2a:00.0 to pod vms/virt-launcher-b")
	ready, _ := rd.d.Readiness()
	assert.False(t, ready)
	r, ok := readReady(dir)
	require.True(t, ok)
	assert.False(t, r.Ready)
	assert.Equal(t, "vfio-pci", k.DriverOf(held))
	assert.Equal(t, "vfio-pci", k.DriverOf(allocated))

	require.NoError(t, k.Exit(4242))
	pods.Delete("on")
	eventually(t, "released", func() bool { r, ok := rd.last(); return ok && r.Done })
	ready, _ = rd.d.Readiness()
	assert.True(t, ready)
	for _, a := range k.Addresses() {
		assert.NotContains(t, k.DriverOf(a), "vfio", a)
	}
	before := drivers(k)
	rd.stop(t)
	assert.Equal(t, before, drivers(k))
	assert.Empty(t, k.Violations())
}

// TestReleaseHoldsTheLockForItsLife: while a release runs, a VFIO manager
// of the config being left (an old pod still terminating) cannot take the
// host lock, so it cannot bind a function back; once the release stops it
// can.
func TestReleaseHoldsTheLockForItsLife(t *testing.T) {
	k, h := buildFixture(t, "a10")
	move(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	dir := t.TempDir()
	rd := startRelease(t, h, dir, nil)
	eventually(t, "released", func() bool { r, ok := rd.last(); return ok && r.Done })
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))

	old, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, LockFile: filepath.Join(dir, "vfio.lock"), Log: logr.Discard()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = old.Reconcile(ctx)
	require.Error(t, err, "the old daemon waits for the lock")
	assert.Contains(t, err.Error(), "held by another process")
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"))

	rd.stop(t)
	_, err = old.Reconcile(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:3b:00.0"), "with the release gone the lock is free")
}

// TestReleaseReportFromReadiness: a ready report is done; otherwise the
// reason and what is left, with a reason even when the daemon gave none.
func TestReleaseReportFromReadiness(t *testing.T) {
	assert.Equal(t, wire.ReleaseReport{Done: true}, ReleaseReport(&ReadyReport{Ready: true, VFIO: []string{}}))
	assert.Equal(t, wire.ReleaseReport{Reason: "not released yet"}, ReleaseReport(&ReadyReport{}))
	assert.Equal(t, wire.ReleaseReport{Reason: "cannot reconcile: boom", Left: []string{"0000:3b:00.0"}},
		ReleaseReport(&ReadyReport{Reason: "cannot reconcile: boom", VFIO: []string{"0000:3b:00.0"}}))
}

// TestReleaseClasses: a release limited to PCI classes returns only those
// and judges only those; a bad class is bad input naming it.
func TestReleaseClasses(t *testing.T) {
	_, toHost, err := Desired{Release: true, Classes: []string{"0x0302"}}.Selections()
	require.NoError(t, err)
	assert.Equal(t, []string{"0302"}, toHost.Classes)
	_, _, err = Desired{Release: true, Classes: []string{"3"}}.Selections()
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), `"3"`)
	assert.True(t, ClassMatches(0x030200, []string{"03"}))
	assert.False(t, ClassMatches(0x068000, []string{"03"}))
	assert.True(t, ClassMatches(0x068000, nil))
}
