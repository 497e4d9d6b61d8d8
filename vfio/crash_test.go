package vfio

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/vfio/host"
	"github.com/sandbox-gpu/sandbox-gpu/vfio/host/hostsim"
)

// TestCrashAfterEveryWrite kills a bind (and an unbind) after each single
// sysfs write of its plan, for every fixture, then runs the same command
// again: it must converge to the state of an uninterrupted run, with no
// function left driverless and nothing unbound that a process held.
func TestCrashAfterEveryWrite(t *testing.T) {
	sel := allOf(host.VendorNVIDIA)
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
				run(t, h, sel, target)
				want := drivers(k)
				total := len(k.Writes())
				if target == ToVFIO && fx.Name != "iommu-off" {
					require.NotZero(t, total, "the clean run must write something to crash in")
				}
				for n := 1; n < total; n++ {
					k, h := prepare(t)
					k.CrashAfter(n)
					run(t, h, sel, target)
					require.Len(t, k.Writes(), n, "crash after write %d", n)
					k.CrashAfter(0)
					res := run(t, h, sel, target)
					assert.Equal(t, want, drivers(k), "state after crash at write %d/%d and a re-run", n, total)
					assert.Empty(t, k.Violations(), "crash at write %d", n)
					if fx.Name != "shared-nic" && fx.Name != "gpu-in-use" && fx.Name != "iommu-off" {
						assert.True(t, res.OK(), "re-run after crash at write %d: %v", n, res.Refused)
					}
				}
			})
		}
	}
}

// TestCrashedBindThenUnbind checks that an interrupted bind can also be
// undone: unbind after a crash at any write restores the host drivers.
func TestCrashedBindThenUnbind(t *testing.T) {
	sel := allOf(host.VendorNVIDIA)
	k, h := buildFixture(t, "workstation")
	start := drivers(k)
	run(t, h, sel, ToVFIO)
	total := len(k.Writes())
	for n := 1; n < total; n++ {
		k, h := buildFixture(t, "workstation")
		k.CrashAfter(n)
		run(t, h, sel, ToVFIO)
		k.CrashAfter(0)
		res := run(t, h, sel, ToHost)
		assert.True(t, res.OK(), "unbind after crash at write %d: %v", n, res.Refused)
		assert.Equal(t, start, drivers(k), "crash at write %d", n)
	}
}
