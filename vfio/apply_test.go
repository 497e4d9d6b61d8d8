package vfio

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// TestBindUnbindRoundTrip binds then unbinds every fixture and checks the
// kernel state, that refused groups saw no write, that nothing outside the
// plan was touched, and that a second run writes nothing.
func TestBindUnbindRoundTrip(t *testing.T) {
	for _, fx := range hostsim.Fixtures() {
		t.Run(fx.Name, func(t *testing.T) {
			k, h := buildFixture(t, fx.Name)
			start := drivers(k)
			sel := allOf(host.VendorNVIDIA)

			plan := planFor(t, h, sel, ToVFIO)
			res := Apply(context.Background(), h, plan, ApplyOptions{})
			assert.ElementsMatch(t, addrs(plan.Actions), addrs(res.Actions), "every planned action done")
			assert.Equal(t, plan.Refused, res.Refused)
			touched := map[host.Address]bool{}
			for _, w := range k.Writes() {
				touched[w.Address] = true
			}
			planned := map[host.Address]bool{}
			for _, a := range plan.Actions {
				planned[a.Address] = true
				assert.Equal(t, a.To, k.DriverOf(a.Address), "driver of %s after bind", a.Address)
				assert.True(t, vfioNodeExists(k, a.Group), "/dev/vfio/%d after bind", a.Group)
			}
			for a := range touched {
				assert.True(t, planned[a], "write to %s, which is outside the plan", a)
			}
			for _, r := range plan.Refused {
				assert.Equal(t, start[r.Address], k.DriverOf(r.Address), "refused %s left as it was", r.Address)
			}

			k.ResetWrites()
			again := run(t, h, sel, ToVFIO)
			assert.Empty(t, again.Actions)
			assert.Empty(t, k.Writes(), "a second bind writes nothing")

			k.ResetWrites()
			back := run(t, h, sel, ToHost)
			assert.True(t, back.OK(), "%v", back.Refused)
			assert.Equal(t, start, drivers(k), "unbind returns every function to its host driver")
			for _, a := range plan.Actions {
				assert.False(t, vfioNodeExists(k, a.Group), "/dev/vfio/%d gone after unbind", a.Group)
			}
			k.ResetWrites()
			run(t, h, sel, ToHost)
			assert.Empty(t, k.Writes(), "a second unbind writes nothing")
			assert.Empty(t, k.Violations())
		})
	}
}

func TestBindRestoresHostDriverWhenProbeFails(t *testing.T) {
	k, h := buildFixture(t, "a10")
	plan := planFor(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	// A driver that shows in sysfs but whose probe rejects the device.
	require.NoError(t, os.MkdirAll(filepath.Join(k.Root(), "sys", "bus", "pci", "drivers", "rejecting_vfio"), 0o755))
	plan.Actions[0].To = "rejecting_vfio"
	res := Apply(context.Background(), h, plan, ApplyOptions{})
	require.Len(t, res.Refused, 1)
	assert.Contains(t, res.Refused[0].Reason, "failed")
	assert.Contains(t, res.Refused[0].Reason, "restored")
	assert.Equal(t, "nvidia", k.DriverOf("0000:3b:00.0"), "never left driverless")
	f, err := h.ReadFunction("0000:3b:00.0")
	require.NoError(t, err)
	assert.Empty(t, f.DriverOverride, "override cleared again")
}

// TestGroupsApplyInParallel proves independent groups are applied at the
// same time: every GPU unbind waits until all eight have arrived, which
// only happens when they run concurrently.
func TestGroupsApplyInParallel(t *testing.T) {
	k, h := buildFixture(t, "hgx-h100")
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	deadline, cancel := context.WithTimeout(context.Background(), 10*time.Second) // one deadline for the whole test
	defer cancel()
	k.SetLatency(func(w hostsim.Write) time.Duration {
		if !strings.HasSuffix(w.Path, "/unbind") {
			return 0
		}
		mu.Lock()
		arrived++
		if arrived == 8 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-deadline.Done():
		}
		return 0
	})
	res := run(t, h, Selection{All: true, Vendor: host.VendorNVIDIA}, ToVFIO)
	require.True(t, res.OK(), "%v", res.Refused)
	select {
	case <-all:
	default:
		t.Fatal("the eight GPU unbinds never overlapped: groups were not applied in parallel")
	}
}

// TestFunctionsOfOneGroupInOrder checks the writes of a multi-function
// group are sequential and in plan order.
func TestFunctionsOfOneGroupInOrder(t *testing.T) {
	k, h := buildFixture(t, "workstation")
	plan := planFor(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	Apply(context.Background(), h, plan, ApplyOptions{})
	var seen []host.Address
	for _, w := range k.Writes() {
		if len(seen) == 0 || seen[len(seen)-1] != w.Address {
			seen = append(seen, w.Address)
		}
	}
	assert.Equal(t, addrs(plan.Actions), seen)
}

// TestUnbindWithoutModulesAlias: a container without the host's
// /lib/modules still returns functions to their host driver, because the
// kernel picks the driver on probe.
func TestUnbindWithoutModulesAlias(t *testing.T) {
	k, h := buildFixture(t, "workstation")
	start := drivers(k)
	require.True(t, run(t, h, allOf(host.VendorNVIDIA), ToVFIO).OK())
	require.NoError(t, os.Remove(filepath.Join(k.Options().ModulesDir, "modules.alias")))
	res := run(t, h, allOf(host.VendorNVIDIA), ToHost)
	require.True(t, res.OK(), "%v", res.Refused)
	assert.Equal(t, start, drivers(k))
	for _, a := range res.Actions {
		assert.Equal(t, start[a.Address], a.To, "the reported driver is the one the kernel chose for %s", a.Address)
	}
}
