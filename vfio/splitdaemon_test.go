package vfio

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
)

// testDecl is a declaration the test changes, as a Node's annotation would.
type testDecl struct {
	mu      sync.Mutex
	value   string
	err     error
	changed chan struct{}
}

func newDecl(value string) *testDecl {
	return &testDecl{value: value, changed: make(chan struct{}, 1)}
}

func (d *testDecl) set(value string, err error) {
	d.mu.Lock()
	d.value, d.err = value, err
	d.mu.Unlock()
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

func (d *testDecl) declaration() *Declaration {
	return &Declaration{Source: "node gpu-1: annotation sandbox-gpu.io/vm-gpus", Changed: d.changed, Get: func() (string, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.value, d.err
	}}
}

// testAllocs is a kubelet the test changes.
type testAllocs struct {
	mu      sync.Mutex
	holders map[string][]podresources.Holder
}

func (a *testAllocs) set(id, pod string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holders = map[string][]podresources.Holder{}
	if id != "" {
		a.holders[podresources.NormID(id)] = []podresources.Holder{{Pod: pod, Container: "compute", Resource: "nvidia.com/GH100_H100_SXM5_80GB"}}
	}
}

func (a *testAllocs) get(context.Context) (map[string][]podresources.Holder, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.holders, nil
}

func startSplitDaemon(t *testing.T, h *host.Host, decl *testDecl, alloc Allocations, resync time.Duration) *runningDaemon {
	t.Helper()
	return runDaemon(t, DaemonOptions{Host: h, Desired: Desired{All: true}, ReadyDir: t.TempDir(), Resync: resync, Log: logr.Discard(),
		VMGPUsFrom: decl.declaration(), Allocations: alloc})
}

// report waits for a report that satisfies cond.
func (rd *runningDaemon) report(t *testing.T, what string, cond func(*ReadyReport) bool) *ReadyReport {
	t.Helper()
	var last *ReadyReport
	eventually(t, what, func() bool {
		_, r := rd.d.Readiness()
		last, _ = r.(*ReadyReport)
		return last != nil && last.Split != nil && cond(last)
	})
	return last
}

func onDrivers(k *hostsim.Kernel, driver string, as []host.Address) bool {
	for _, a := range as {
		if k.DriverOf(a) != driver {
			return false
		}
	}
	return true
}

// TestDaemonFollowsTheSplit: the daemon moves the declared count of GPUs
// to vfio and leaves the rest, and the NVSwitches, on nvidia; 2 -> 3
// writes for one GPU only; 3 -> 1 returns two idle GPUs; ready each time.
func TestDaemonFollowsTheSplit(t *testing.T) {
	k, h := buildFixture(t, "hgx-h100")
	decl := newDecl("2")
	rd := startSplitDaemon(t, h, decl, nil, time.Hour)
	rep := rd.report(t, "two VM GPUs", func(r *ReadyReport) bool { return r.Ready })
	assert.Equal(t, hgx(4, 5), rep.Split.VM)
	assert.Equal(t, hgx(0, 1, 2, 3, 6, 7), rep.Split.Container)
	assert.Equal(t, "2", rep.Split.Declared)
	assert.True(t, onDrivers(k, "vfio-pci", hgx(4, 5)))
	assert.True(t, onDrivers(k, "nvidia", append(hgx(0, 1, 2, 3, 6, 7), "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")),
		"container GPUs and NVSwitches stay on nvidia")

	k.ResetWrites()
	decl.set("3", nil)
	rep = rd.report(t, "three VM GPUs", func(r *ReadyReport) bool { return r.Ready && len(r.Split.VM) == 3 })
	assert.Equal(t, hgx(4, 5, 6), rep.Split.VM)
	require.NotEmpty(t, k.Writes())
	for _, w := range k.Writes() {
		if w.Address != "" {
			assert.Equal(t, hgxGPUs[6], w.Address, "only the added GPU moves: %s", w.Path)
		}
	}

	decl.set("1", nil)
	rep = rd.report(t, "one VM GPU", func(r *ReadyReport) bool { return r.Ready && len(r.Split.VM) == 1 })
	assert.Equal(t, hgx(4), rep.Split.VM)
	assert.ElementsMatch(t, []host.Address{hgxGPUs[5], hgxGPUs[6]}, addrs(rep.Actions))
	assert.True(t, onDrivers(k, "nvidia", hgx(0, 1, 2, 3, 5, 6, 7)))
	assert.Equal(t, "vfio-pci", k.DriverOf(hgxGPUs[4]))
	rd.stop(t)
	assert.Empty(t, k.Violations())
}

// TestDaemonSplitLeavesHeldGPUs: going from 3 VM GPUs to none, a GPU a VM
// holds (QEMU has its VFIO group open) and one the kubelet allocated to a
// VM pod that has not opened it stay on vfio, reported (refusals, left,
// the reason) and not ready; once free they return and it is ready.
func TestDaemonSplitLeavesHeldGPUs(t *testing.T) {
	k, h := buildFixture(t, "hgx-h100")
	move(t, h, Selection{Devices: hgx(4, 5, 6)}, ToVFIO)
	require.NoError(t, k.HoldOpen(900, "qemu-kvm", "vfio/25")) // GPU 5
	allocs := &testAllocs{}
	allocs.set(string(hgxGPUs[6]), "vms/virt-launcher-b")
	decl := newDecl("0")
	rd := startSplitDaemon(t, h, decl, allocs.get, 20*time.Millisecond)
	rep := rd.report(t, "held GPUs reported", func(r *ReadyReport) bool { return len(r.Split.Left) == 2 })
	assert.False(t, rep.Ready)
	assert.Equal(t, hgx(5, 6), rep.Split.Left)
	assert.Contains(t, refusedFor(rep.Wire(), hgxGPUs[5]), "qemu-kvm")
	assert.Contains(t, refusedFor(rep.Wire(), hgxGPUs[6]), "allocated as 0000:ba:00.0 to pod vms/virt-launcher-b")
	assert.Contains(t, rep.Reason, string(hgxGPUs[5])+": in use")
	assert.Contains(t, rep.Reason, string(hgxGPUs[6])+": in use")
	assert.Equal(t, "nvidia", k.DriverOf(hgxGPUs[4]), "the idle one went back")
	assert.True(t, onDrivers(k, "vfio-pci", hgx(5, 6)))

	require.NoError(t, k.Exit(900))
	allocs.set("", "")
	rep = rd.report(t, "all back", func(r *ReadyReport) bool { return r.Ready })
	assert.Empty(t, rep.Split.Left)
	assert.True(t, onDrivers(k, "nvidia", hgxGPUs))
	rd.stop(t)
	assert.Empty(t, k.Violations())
}

// TestDaemonBadSplitChangesNothing: a bad value, or one the node does not
// fit, is an error naming the node, the annotation and the value; nothing
// moves and the daemon is not ready with that reason. An unreadable
// declaration (the Node not read yet) moves nothing either.
func TestDaemonBadSplitChangesNothing(t *testing.T) {
	k, h := buildFixture(t, "hgx-h100")
	decl := newDecl("three")
	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, ReadyDir: t.TempDir(), Log: logr.Discard(), VMGPUsFrom: decl.declaration()})
	require.NoError(t, err)
	for value, want := range map[string]string{
		"three":    `node gpu-1: annotation sandbox-gpu.io/vm-gpus: bad input: "three": want all, a count`,
		"9":        `node gpu-1: annotation sandbox-gpu.io/vm-gpus: bad input: "9": this node has 8 GPUs`,
		"index:12": `node gpu-1: annotation sandbox-gpu.io/vm-gpus: bad input: "index:12": no GPU 12`,
		"model:A1": `node gpu-1: annotation sandbox-gpu.io/vm-gpus: bad input: "model:A1": a model name needs a pci.ids file`,
	} {
		decl.set(value, nil)
		_, err := d.Reconcile(context.Background())
		require.ErrorIs(t, err, ErrBadInput, value)
		assert.Contains(t, err.Error(), want)
		ok, detail := d.Readiness()
		assert.False(t, ok)
		assert.Contains(t, detail.(*ReadyReport).Reason, want)
	}
	decl.set("", errors.New("not read yet: connection refused"))
	_, err = d.Reconcile(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node gpu-1: annotation sandbox-gpu.io/vm-gpus: not read yet")
	assert.Empty(t, k.Writes(), "nothing moved")

	_, err = NewDaemon(DaemonOptions{Host: h, Desired: Desired{Release: true}, VMGPUsFrom: decl.declaration()})
	require.ErrorIs(t, err, ErrBadInput, "a release splits nothing")
	_, err = ParseDesired("c.yaml", []byte("vmGPUs: \"2\"\ndevices: [\"0000:3b:00.0\"]\n"))
	require.ErrorIs(t, err, ErrBadInput)
	_, err = ParseDesired("c.yaml", []byte("vmGPUs: two\n"))
	require.ErrorIs(t, err, ErrBadInput)
	assert.Contains(t, err.Error(), "config c.yaml: vmGPUs")
}

// TestDaemonSplitMovesWholeGroups: a VM GPU's companion functions in its
// IOMMU group (HD audio) follow it to vfio; the other card, on NUMA node
// 0, stays on its host drivers whole. The split comes from the desired
// state (vmGPUs, as --vm-gpus sets it).
func TestDaemonSplitMovesWholeGroups(t *testing.T) {
	k, h := buildFixture(t, "workstation") // card 01:00 on NUMA node 0, group 1
	require.NoError(t, k.AddFunction(hostsim.Func{Address: "0000:02:00.0", Vendor: 0x10de, Device: 0x2230, SubVendor: 0x10de, SubDevice: 0x1459,
		Class: 0x030000, Driver: "nvidia", Group: 2, NUMA: 1, NvidiaMinor: 1}))
	require.NoError(t, k.AddFunction(hostsim.Func{Address: "0000:02:00.1", Vendor: 0x10de, Device: 0x1aef, SubVendor: 0x10de, SubDevice: 0x1459,
		Class: 0x040300, Driver: "snd_hda_intel", Group: 2, NUMA: 1, NvidiaMinor: -1}))
	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{VMGPUs: "1"}, Log: logr.Discard()})
	require.NoError(t, err)
	rep, err := d.Reconcile(context.Background())
	require.NoError(t, err)
	assert.True(t, rep.Ready, rep.Reason)
	assert.Equal(t, "--vm-gpus", rep.Split.Source)
	assert.Equal(t, []host.Address{"0000:02:00.0"}, rep.Split.VM)
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:02:00.0"))
	assert.Equal(t, "vfio-pci", k.DriverOf("0000:02:00.1"), "the audio function follows its GPU")
	for _, a := range []host.Address{"0000:01:00.0", "0000:01:00.1", "0000:01:00.2", "0000:01:00.3"} {
		assert.False(t, strings.HasPrefix(k.DriverOf(a), "vfio"), "%s stays on its host driver", a)
	}
}

// TestDaemonRetriesSoonAfterARefusal: a GPU left where it was because it
// was in use moves once it is free, at the next retry, without waiting for
// the resync (an hour here) or a change of the declaration.
func TestDaemonRetriesSoonAfterARefusal(t *testing.T) {
	k, h := buildFixture(t, "hgx-h100")
	move(t, h, Selection{Devices: hgx(5)}, ToVFIO)
	require.NoError(t, k.HoldOpen(900, "qemu-kvm", "vfio/25")) // GPU 5
	d, err := NewDaemon(DaemonOptions{Host: h, Desired: Desired{All: true}, ReadyDir: t.TempDir(), Resync: time.Hour, Retry: 20 * time.Millisecond,
		Log: logr.Discard(), VMGPUsFrom: newDecl("0").declaration()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rd := &runningDaemon{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { rd.done <- d.Run(ctx) }()
	t.Cleanup(cancel)
	rep := rd.report(t, "the held GPU reported", func(r *ReadyReport) bool { return len(r.Split.Left) == 1 })
	assert.Contains(t, refusedFor(rep.Wire(), hgxGPUs[5]), "qemu-kvm")

	require.NoError(t, k.Exit(900))
	rep = rd.report(t, "moved at a retry", func(r *ReadyReport) bool { return r.Ready })
	assert.Empty(t, rep.Split.Left)
	assert.Equal(t, "nvidia", k.DriverOf(hgxGPUs[5]))
	rd.stop(t)
	assert.Empty(t, k.Violations())
}
