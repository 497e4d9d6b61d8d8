package vfio

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
)

// ReadyReport is what a reconcile found and did, as the daemon judges it
// and hands it to OnReport and its readiness check. Readers see it as the
// readiness file and /readyz carry it: Wire (wire.VFIOReady, which adds the
// daemon's pid and heartbeat), also its JSON.
type ReadyReport struct {
	// Ready: every selected function is where the desired state wants it;
	// Reason says why not, in a sentence.
	Ready  bool
	Reason string
	Time   time.Time
	// VFIO are the functions on a vfio driver.
	VFIO []string
	// Actions are what the reconcile moved, Refused what it left alone.
	Actions []Action
	Refused []Refusal
	// Error is why the reconcile could not run.
	Error string
	// Split is how the node's GPUs split between VMs and containers, when
	// a split is declared (vmGPUs, --vm-gpus or the Node's annotation).
	Split *Split
}

// Wire is the report as the readiness file and /readyz carry it.
func (r *ReadyReport) Wire() *wire.VFIOReady {
	w := &wire.VFIOReady{Ready: r.Ready, Reason: r.Reason, Time: r.Time, VFIO: r.VFIO, Error: r.Error,
		Actions: convert(r.Actions, func(a Action) wire.VFIOMove {
			return wire.VFIOMove{Address: string(a.Address), From: a.From, To: a.To}
		}),
		Refused: convert(r.Refused, func(x Refusal) wire.VFIORefusal {
			return wire.VFIORefusal{Address: string(x.Address), Reason: x.Reason}
		}),
	}
	if s := r.Split; s != nil {
		str := func(a host.Address) string { return string(a) }
		w.Split = &wire.VFIOSplit{Declared: s.Declared, Source: s.Source,
			VM: convert(s.VM, str), Container: convert(s.Container, str), Left: convert(s.Left, str)}
	}
	return w
}

// MarshalJSON writes the report as wire.VFIOReady.
func (r ReadyReport) MarshalJSON() ([]byte, error) { return json.Marshal(r.Wire()) }

// convert maps a list, keeping nil (null in JSON) apart from empty ([]).
func convert[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, 0, len(in))
	for _, x := range in {
		out = append(out, f(x))
	}
	return out
}

// judgeRefusals says whether a reconcile with these refusals leaves the
// node ready: any refusal means a selected function is not where it should
// be (IOMMU off, a group shared with a busy device, a GPU in use), except a
// function the desired state names that this node does not have (a config
// shared by nodes of different shapes).
func judgeRefusals(refused []Refusal) (bool, string) {
	var reasons []string
	for _, r := range refused {
		if strings.HasPrefix(r.Reason, "not found:") {
			continue
		}
		reasons = append(reasons, fmt.Sprintf("%s: %s", r.Address, r.Reason))
	}
	if len(reasons) == 0 {
		return true, ""
	}
	return false, strings.Join(reasons, "; ")
}
