// Package vfiotest moves simulated functions between drivers for other
// packages' tests (device plugins, operator agents).
package vfiotest

import (
	"context"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// AllNVIDIA selects every NVIDIA function, NVSwitches included.
var AllNVIDIA = vfio.Selection{All: true, Vendor: host.VendorNVIDIA, NVSwitches: true}

// Devices selects the given functions.
func Devices(addrs ...host.Address) vfio.Selection {
	return vfio.Selection{Devices: addrs, Vendor: host.VendorNVIDIA}
}

// Move plans and applies a move, failing the test unless every selected
// function reached the target.
func Move(tb testing.TB, h *host.Host, sel vfio.Selection, target vfio.Target) {
	tb.Helper()
	p, err := vfio.NewPlanner(h)
	if err != nil {
		tb.Fatal(err)
	}
	plan, err := p.Plan(sel, target)
	if err != nil {
		tb.Fatal(err)
	}
	if res := vfio.Apply(context.Background(), h, plan, vfio.ApplyOptions{}); !res.OK() {
		tb.Fatalf("move to %s: refused %v", target, res.Refused)
	}
}
