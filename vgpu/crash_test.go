package vgpu

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// TestCrashAfterEveryWrite kills an apply after each single sysfs write of
// every vGPU fixture's config changes (from nothing, between configs of
// other sizes, back to nothing), then runs the same apply again: it must
// end in the state of an uninterrupted run (every GPU holds exactly the
// vGPUs of the config, the same UUIDs), refuse nothing, write nothing on a
// third run, and never remove a device a process holds. The crashed run
// applies GPUs one after the other, so that write n is the same point of
// the plan on every run; the re-run is parallel, as in production.
func TestCrashAfterEveryWrite(t *testing.T) {
	cfg := parse(t, testConfig)
	transitions := [][2]string{{"none", "default"}, {"default", "small"}, {"small", "default"}, {"small", "none"}}
	seq := ApplyOptions{Sequential: true}
	for _, fx := range []string{"t4-vgpu", "a100-sriov-vgpu", "l40s-vgpu"} {
		for _, tr := range transitions {
			t.Run(fmt.Sprintf("%s/%s-to-%s", fx, tr[0], tr[1]), func(t *testing.T) {
				prepare := func(t *testing.T) (*hostsim.Kernel, *host.Host) {
					k, h := fixture(t, fx)
					require.True(t, apply(t, h, cfg, tr[0], Options{}, ApplyOptions{}).OK())
					k.ResetWrites()
					return k, h
				}
				k, h := prepare(t)
				clean := apply(t, h, cfg, tr[1], Options{}, seq)
				require.True(t, clean.OK(), "%v", clean.Refused)
				want := state(t, h)
				total := len(k.Writes())
				require.NotZero(t, total, "the clean run must write something to crash in")
				for n := 1; n < total; n++ {
					k, h := prepare(t)
					k.CrashAfter(n)
					crashed := apply(t, h, cfg, tr[1], Options{}, seq)
					require.False(t, crashed.OK(), "crash at write %d", n)
					require.Len(t, k.Writes(), n, "crash after write %d", n)
					k.CrashAfter(0)
					res := apply(t, h, cfg, tr[1], Options{}, ApplyOptions{})
					assert.True(t, res.OK(), "re-run after a crash at write %d/%d: %v", n, total, res.Refused)
					assert.Equal(t, want, state(t, h), "state after a crash at write %d/%d and a re-run", n, total)
					k.ResetWrites()
					apply(t, h, cfg, tr[1], Options{}, ApplyOptions{})
					assert.Empty(t, k.Writes(), "converged after a crash at write %d: a third run writes nothing", n)
					assert.Empty(t, k.Violations(), "crash at write %d", n)
				}
			})
		}
	}
}
