package vfio

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

func buildFixture(t testing.TB, name string) (*hostsim.Kernel, *host.Host) {
	t.Helper()
	return hostsim.NewHost(t, name)
}

func allOf(vendor uint16) Selection {
	return Selection{All: true, Vendor: vendor, NVSwitches: true}
}

func planFor(t testing.TB, h *host.Host, sel Selection, target Target) *Plan {
	t.Helper()
	p, err := NewPlanner(h)
	require.NoError(t, err)
	plan, err := p.Plan(sel, target)
	require.NoError(t, err)
	return plan
}

func run(t testing.TB, h *host.Host, sel Selection, target Target) *Result {
	t.Helper()
	return Apply(context.Background(), h, planFor(t, h, sel, target), ApplyOptions{})
}

// drivers maps every simulated function to its driver.
func drivers(k *hostsim.Kernel) map[host.Address]string {
	out := map[host.Address]string{}
	for _, a := range k.Addresses() {
		out[a] = k.DriverOf(a)
	}
	return out
}

func vfioNodeExists(k *hostsim.Kernel, group int) bool {
	_, err := os.Stat(filepath.Join(k.Root(), "dev", "vfio", strconv.Itoa(group)))
	return err == nil
}

func addrs(as []Action) []host.Address {
	var out []host.Address
	for _, a := range as {
		out = append(out, a.Address)
	}
	return out
}

func hostsimVF(addr, pf string, group int) hostsim.Func {
	return hostsim.Func{Address: addr, Vendor: 0x10de, Device: 0x2236, SubVendor: 0x10de, SubDevice: 0x14b4,
		Class: 0x030200, Driver: "nvidia", Group: group, PhysFn: pf, NvidiaMinor: -1}
}

func move(t testing.TB, h *host.Host, sel Selection, target Target) {
	t.Helper()
	if res := Apply(context.Background(), h, planFor(t, h, sel, target), ApplyOptions{}); !res.OK() {
		t.Fatalf("move to %s: %v", target, res.Refused)
	}
}
