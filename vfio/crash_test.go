package vfio

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

func refusedSet(rs []Refusal) map[host.Address]bool {
	out := map[host.Address]bool{}
	for _, r := range rs {
		out[r.Address] = true
	}
	return out
}

// TestCrashAfterEveryWrite kills a bind (and an unbind) after each single
// sysfs write of its plan, for every fixture, then runs the same command
// again: it must converge to the state of an uninterrupted run, refuse the
// same functions, leave no function driverless and unbind nothing a
// process held. The crashed run applies groups one after the other, so
// that write n is the same point of the plan on every run; the re-run is
// parallel, as in production.
func TestCrashAfterEveryWrite(t *testing.T) {
	sel := allOf(host.VendorNVIDIA)
	seq := ApplyOptions{Sequential: true}
	for _, fx := range hostsim.Fixtures() {
		for _, target := range []Target{ToVFIO, ToHost} {
			t.Run(fmt.Sprintf("%s/%s", fx.Name, target), func(t *testing.T) {
				prepare := func(t *testing.T) (*hostsim.Kernel, *host.Host) {
					k, h := buildFixture(t, fx.Name)
					if target == ToHost {
						run(t, h, sel, ToVFIO)
					}
					k.ResetWrites()
					return k, h
				}
				k, h := prepare(t)
				clean := Apply(context.Background(), h, planFor(t, h, sel, target), seq)
				want := drivers(k)
				total := len(k.Writes())
				if target == ToVFIO && fx.Name != "iommu-off" {
					require.NotZero(t, total, "the clean run must write something to crash in")
				}
				for n := 1; n < total; n++ {
					k, h := prepare(t)
					k.CrashAfter(n)
					Apply(context.Background(), h, planFor(t, h, sel, target), seq)
					require.Len(t, k.Writes(), n, "crash after write %d", n)
					k.CrashAfter(0)
					res := run(t, h, sel, target)
					assert.Equal(t, want, drivers(k), "state after crash at write %d/%d and a re-run", n, total)
					assert.Equal(t, refusedSet(clean.Refused), refusedSet(res.Refused), "refusals after crash at write %d: %v", n, res.Refused)
					assert.Empty(t, k.Violations(), "crash at write %d", n)
				}
			})
		}
	}
}

// TestCrashedUnbindWithoutModulesAlias: a container without the host's
// modules.alias re-runs an interrupted unbind; the kernel's probe still
// returns every function to its host driver.
func TestCrashedUnbindWithoutModulesAlias(t *testing.T) {
	sel := allOf(host.VendorNVIDIA)
	for _, name := range []string{"workstation", "hgx-h100"} {
		t.Run(name, func(t *testing.T) {
			k, h := buildFixture(t, name)
			start := drivers(k)
			run(t, h, sel, ToVFIO)
			k.ResetWrites()
			run(t, h, sel, ToHost)
			total := len(k.Writes())
			for n := 1; n < total; n++ {
				k, h := buildFixture(t, name)
				run(t, h, sel, ToVFIO)
				k.CrashAfter(n)
				Apply(context.Background(), h, planFor(t, h, sel, ToHost), ApplyOptions{Sequential: true})
				k.CrashAfter(0)
				require.NoError(t, os.Remove(filepath.Join(k.Options().ModulesDir, "modules.alias")))
				res := run(t, h, sel, ToHost)
				assert.True(t, res.OK(), "crash at write %d: %v", n, res.Refused)
				assert.Equal(t, start, drivers(k), "crash at write %d", n)
			}
		})
	}
}

// TestCrashedBindThenUnbind checks that an interrupted bind can also be
// undone: unbind after a crash at any write restores the host drivers.
func TestCrashedBindThenUnbind(t *testing.T) {
	sel := allOf(host.VendorNVIDIA)
	for _, name := range []string{"workstation", "hgx-h100", "gh200"} {
		t.Run(name, func(t *testing.T) {
			k, h := buildFixture(t, name)
			start := drivers(k)
			run(t, h, sel, ToVFIO)
			total := len(k.Writes())
			for n := 1; n < total; n++ {
				k, h := buildFixture(t, name)
				k.CrashAfter(n)
				Apply(context.Background(), h, planFor(t, h, sel, ToVFIO), ApplyOptions{Sequential: true})
				k.CrashAfter(0)
				res := run(t, h, sel, ToHost)
				assert.True(t, res.OK(), "unbind after crash at write %d: %v", n, res.Refused)
				assert.Equal(t, start, drivers(k), "crash at write %d", n)
			}
		})
	}
}
