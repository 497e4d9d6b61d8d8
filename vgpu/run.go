package vgpu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandbox-gpu/sandbox-gpu/internal/hostlock"
	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode"
	"github.com/sandbox-gpu/sandbox-gpu/internal/ownnode/ownmeta"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// RunOptions configure Run.
type RunOptions struct {
	Client   kubernetes.Interface
	NodeName string
	// ConfigFile is the vGPU config (a ConfigMap mount, updated by rename:
	// its folder is watched).
	ConfigFile string
	// Default is the config of a node without the nvidia.com/vgpu.config
	// label (the policy's default; vgpuconfig.DefaultName when empty).
	Default string
	Host    HostView
	// RunDir holds the pause and ready files (names.RunDir on a node).
	RunDir    string
	Allocated Allocated // the kubelet's allocations; nil for none
	// TypeNames names vendor-VFIO type ids nobody remembers (NVML on a
	// node: vgpu/nvmltypes); nil for none. Run keeps its own TypeMemory in
	// names.VGPUTypesFile in RunDir in front of it, which asks it only for
	// the ids a VF holds that neither the driver's lists nor the memory
	// name; an error it returns fails the pass, so a namer that may fail
	// (NVML) names nothing instead and logs why.
	TypeNames TypeNamer
	// Resync applies again without an event (default 5m).
	Resync time.Duration
	// Retry applies again this soon after a pass that left the node failed
	// (a vGPU in use that the config would remove, the host driver not up
	// yet), so a VM that exits is followed within seconds, not a resync
	// (default 10s; never longer than Resync).
	Retry time.Duration
	Log   logr.Logger
	// Observe, when set, gets the ready report after every pass.
	Observe func(wire.VGPUReady)
	// LockFile, when set, is the host-wide lock (names.VGPULockFile in the
	// run dir): each pass holds it; a release holds it for its life.
	LockFile string
	// Release runs the release instead of a config (a node leaving
	// vm-vgpu): every vGPU removed and every GPU's VFs disabled, never one
	// in use; no config is read, the nvidia.com/vgpu.config.state label is
	// left alone (the operator removes it), the ready file of the config
	// that is left is removed, and the report goes to the Node's
	// names.ReleaseReportAnnotation(vgpu-device-manager) annotation.
	Release bool
}

// Run keeps the node's vGPUs as its selected config says until ctx ends.
// It watches only its own Node: the config is the nvidia.com/vgpu.config
// label (missing: o.Default), applied at start, when the label or the
// config file changes, and every o.Resync. It reports progress in the
// nvidia.com/vgpu.config.state label (pending before a change, success or
// failed after, written only when it differs), a Warning event on the Node
// naming the reason of a failure, and the ready file; while it changes
// vGPUs the pause file exists. A pause file left by a crash goes after the
// first pass. Steady state costs no write at all.
func Run(ctx context.Context, o RunOptions) error {
	if err := ownnode.Check("vgpu run", o.NodeName, o.Client); err != nil {
		return err
	}
	switch {
	case o.Host == nil:
		return errors.New("vgpu run: no host")
	case o.ConfigFile == "" && !o.Release:
		return errors.New("vgpu run: no config file")
	case o.RunDir == "":
		return errors.New("vgpu run: no run folder")
	}
	if o.Default == "" {
		o.Default = vgpuconfig.DefaultName
	}
	if o.Resync <= 0 {
		o.Resync = 5 * time.Minute
	}
	if o.Retry <= 0 {
		o.Retry = 10 * time.Second
	}
	o.Retry = min(o.Retry, o.Resync)
	if err := os.MkdirAll(o.RunDir, 0o755); err != nil {
		return fmt.Errorf("vgpu run: %w", err)
	}
	r := &runner{o: o, stale: map[string]bool{}, typesFile: filepath.Join(o.RunDir, names.VGPUTypesFile)}
	var lerr error
	if r.types, lerr = LoadTypeMemory(r.typesFile, o.TypeNames); lerr != nil {
		// Names are learned again from the driver's lists; a vGPU no list
		// names is reported as unknown, never guessed.
		o.Log.Error(lerr, "Cannot read the remembered vGPU type names; starting without them", "file", r.typesFile)
	}
	if o.Release {
		r.publisher = &ownmeta.Publisher{Patch: ownnode.Typed(o.Client).Patch, Node: o.NodeName, Annotation: names.ReleaseReportAnnotation(names.VGPUDeviceManager)}
	}
	nw, err := ownnode.Watch(ctx, o.Client, o.NodeName, func(old, cur *corev1.Node) bool {
		return old == nil || cur != nil && old.Labels[names.VGPUConfigLabel] != cur.Labels[names.VGPUConfigLabel]
	})
	if nw == nil {
		return err // nil: ctx ended
	}
	r.node = nw.Node
	var dirs []string // the config's folder, whose every change wakes a pass
	if !o.Release {
		dirs = []string{filepath.Dir(o.ConfigFile)}
	}
	if o.Release && o.LockFile != "" {
		// A release holds the lock for its life: the device manager of the
		// config being left (an old pod still terminating) cannot create
		// vGPUs again meanwhile.
		unlock, err := hostlock.Acquire(ctx, o.LockFile)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("vgpu run: %w", err)
		}
		defer unlock()
		r.locked = true
	}
	return nw.Loop(ctx, ownnode.LoopOptions{Resync: o.Resync, Dirs: dirs, Log: o.Log}, func() time.Duration {
		if r.pass(ctx) == StateFailed {
			return o.Retry
		}
		return 0
	})
}

// runner is the state of one Run.
type runner struct {
	o    RunOptions
	node func() (*corev1.Node, bool)
	// sent is the state label last written; stale holds the resource
	// versions of the Node from before that write, whose label the cache
	// may still show.
	sent   string
	lastRV string // the Node's resource version our last write returned
	stale  map[string]bool
	// lastEvent is the reason and message of the last event, so a
	// repeated failure is not reported again.
	lastEvent string
	// publisher writes a release's report on the Node (release only).
	publisher *ownmeta.Publisher
	// locked: the release holds the host lock for its life.
	locked bool
	// types names vendor-VFIO type ids the driver no longer lists; kept
	// in typesFile as it learns.
	types     *TypeMemory
	typesFile string
	// modes remembers the GPUs found in equal-size vGPU mode.
	modes SizeModes
}

// pass applies the selected config once and reports the outcome.
// pass applies the selected config once and returns the state it left
// ("" when the Node is not there yet).
func (r *runner) pass(ctx context.Context) (state string) {
	if r.o.LockFile != "" && !r.locked {
		unlock, err := hostlock.Acquire(ctx, r.o.LockFile)
		if err != nil {
			r.o.Log.Error(err, "Cannot take the host lock; not applying")
			return StateFailed
		}
		defer unlock()
	}
	if r.o.Release {
		return r.releasePass(ctx)
	}
	node, ok := r.node()
	if !ok {
		r.o.Log.Info("Node not found; waiting for it", "node", r.o.NodeName)
		return ""
	}
	selected := node.Labels[names.VGPUConfigLabel]
	if selected == "" {
		selected = r.o.Default
	}
	rep := wire.VGPUReady{Config: selected, State: StateFailed}
	defer func() { state = rep.State }()
	defer r.finish(&rep)
	cfg, err := vgpuconfig.Load(r.o.ConfigFile)
	var plan *Plan
	if err == nil {
		plan, err = PlanConfig(ctx, r.o.Host, cfg, selected, Options{NodeName: r.o.NodeName, Allocated: r.o.Allocated, TypeNames: r.types, SizeModes: &r.modes})
	}
	if err != nil {
		rep.Error = err.Error()
		if gpus, ierr := Inventory(r.o.Host, r.types); ierr == nil {
			rep.GPUs = ReadyGPUs(gpus)
		}
		reason := EventFailed
		if vgpuconfig.IsError(err) {
			reason = EventConfigInvalid
		}
		r.setState(ctx, node, StateFailed)
		r.event(ctx, node, corev1.EventTypeWarning, reason, err.Error())
		return
	}
	if plan.Changes() {
		r.setState(ctx, node, StatePending)
	}
	res := Apply(ctx, r.o.Host, plan, ApplyOptions{PauseFile: filepath.Join(r.o.RunDir, names.VGPUPauseFile)})
	var gpus []*GPU
	for _, g := range res.GPUs {
		gpus = append(gpus, g.GPU)
	}
	rep.GPUs, rep.Refused = ReadyGPUs(gpus), readyRefusals(res.Refused)
	if !res.OK() {
		r.setState(ctx, node, StateFailed)
		r.event(ctx, node, corev1.EventTypeWarning, EventRefused, fmt.Sprintf("config %q: %v", selected, res.Err()))
		return
	}
	rep.State = StateSuccess
	r.setState(ctx, node, StateSuccess)
	r.lastEvent = ""
	if plan.Changes() {
		r.event(ctx, node, corev1.EventTypeNormal, EventApplied, fmt.Sprintf("config %q applied: %s", selected, summary(rep.GPUs)))
	}
	return rep.State
}

// finish removes a pause file a crash left, writes the ready file and
// tells the observer.
func (r *runner) finish(rep *wire.VGPUReady) {
	pause := wire.VGPUPause(filepath.Join(r.o.RunDir, names.VGPUPauseFile))
	if err := pause.Clear(); err != nil {
		r.o.Log.Error(err, "Cannot remove the pause file", "file", pause)
	}
	if rep.GPUs == nil {
		rep.GPUs = []wire.VGPUGPU{}
	}
	if err := r.types.Save(); err != nil {
		r.o.Log.Error(err, "Cannot remember the vGPU type names", "file", r.typesFile)
	}
	ready := filepath.Join(r.o.RunDir, names.VGPUReadyFile)
	if r.o.Release {
		// The report of the config being left is stale: the validator of a
		// later vm-vgpu config must not take it for its own.
		if err := wire.RemoveVGPUReady(ready); err != nil {
			r.o.Log.Error(err, "Cannot remove the ready file", "file", ready)
		}
	} else if err := wire.WriteVGPUReady(ready, *rep); err != nil {
		r.o.Log.Error(err, "Cannot write the ready file")
	}
	r.o.Log.V(1).Info("Applied", "node", r.o.NodeName, "config", rep.Config, "state", rep.State, "refused", len(rep.Refused), "error", rep.Error)
	if r.o.Observe != nil {
		r.o.Observe(*rep)
	}
}

func summary(gpus []wire.VGPUGPU) string {
	s := ""
	for i, g := range gpus {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("GPU %d (%s) %s", g.Index, g.Address, counts(g.VGPUs))
	}
	return s
}
