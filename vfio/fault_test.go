package vfio

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
)

// faultFixtures are the shapes a failed move can split or mislead: a card
// of four functions in one group, a variant driver, two lone GPUs, a GPU
// whose group a NIC shares (refused) beside one that moves.
func faultFixtures() []string { return []string{"workstation", "gh200", "a10x2", "shared-nic"} }

// faultRun is one fixture and target, prepared (bound first for ToHost),
// with what an uninterrupted run does.
type faultRun struct {
	fx     string
	target Target
	start  map[host.Address]string // drivers before the apply
	want   map[host.Address]string // drivers after an uninterrupted apply
	clean  *Result
	total  int // writes of the uninterrupted apply
}

func prepareFault(t *testing.T, fx string, target Target) (*hostsim.Kernel, *host.Host) {
	t.Helper()
	k, h := buildFixture(t, fx)
	if target == ToHost {
		run(t, h, allOf(host.VendorNVIDIA), ToVFIO)
	}
	k.ResetWrites()
	return k, h
}

func newFaultRun(t *testing.T, fx string, target Target) faultRun {
	k, h := prepareFault(t, fx, target)
	r := faultRun{fx: fx, target: target, start: drivers(k)}
	r.clean = Apply(context.Background(), h, planFor(t, h, allOf(host.VendorNVIDIA), target), ApplyOptions{Sequential: true})
	r.want, r.total = drivers(k), len(k.Writes())
	return r
}

// TestTransientWriteFailsOnce fails one sysfs write of every fixture's
// bind and unbind with EIO, at every write in turn, and lets the later ones
// succeed: the retry absorbs it, so the apply ends as an uninterrupted one
// (same drivers, same refusals) and unbinds nothing a process holds.
// TestCrashAfterEveryWrite covers every fixture at every write; this one
// the shapes a move can split (faultFixtures) and an HGX board.
func TestTransientWriteFailsOnce(t *testing.T) {
	for _, fx := range append(faultFixtures(), "hgx-h100") {
		for _, target := range []Target{ToVFIO, ToHost} {
			t.Run(fmt.Sprintf("%s/%s", fx, target), func(t *testing.T) {
				r := newFaultRun(t, fx, target)
				for n := 1; n <= r.total; n++ {
					k, h := prepareFault(t, fx, target)
					k.FailWrites(n, 1, syscall.EIO)
					res := Apply(context.Background(), h, planFor(t, h, allOf(host.VendorNVIDIA), target), ApplyOptions{Sequential: true})
					assert.Equal(t, r.want, drivers(k), "EIO once at write %d/%d", n, r.total)
					assert.Equal(t, refusedSet(r.clean.Refused), refusedSet(res.Refused), "EIO once at write %d: %v", n, res.Refused)
					assert.Empty(t, k.Violations(), "EIO once at write %d", n)
				}
			})
		}
	}
}

// TestTransientWriteFailsEveryAttempt fails one write and each of its
// retries with EIO, at every write in turn: the move fails for good. No
// function is left driverless that had a driver before and after an
// uninterrupted run: each ends on its driver from before (restored or
// rolled back) or its target; the report is honest (an action's driver is
// the one the function is on, a function reported restored or rolled back
// is on that driver); and a clean re-run converges.
func TestTransientWriteFailsEveryAttempt(t *testing.T) {
	for _, fx := range faultFixtures() {
		for _, target := range []Target{ToVFIO, ToHost} {
			t.Run(fmt.Sprintf("%s/%s", fx, target), func(t *testing.T) {
				r := newFaultRun(t, fx, target)
				for n := 1; n <= r.total; n++ {
					k, h := prepareFault(t, fx, target)
					k.FailWrites(n, transientAttempts, syscall.EIO)
					res := Apply(context.Background(), h, planFor(t, h, allOf(host.VendorNVIDIA), target), ApplyOptions{Sequential: true})
					at := fmt.Sprintf("EIO for good at write %d/%d", n, r.total)
					got := drivers(k)
					for a, d := range got {
						if d != r.start[a] && d != r.want[a] {
							t.Errorf("%s: %s on %q, neither where it was (%q) nor its target (%q)", at, a, d, r.start[a], r.want[a])
						}
					}
					requireHonest(t, at, res, got)
					assert.Empty(t, k.Violations(), at)

					k.FailWrites(0, 0, nil)
					again := run(t, h, allOf(host.VendorNVIDIA), target)
					assert.Equal(t, r.want, drivers(k), "%s, then a re-run", at)
					assert.Equal(t, refusedSet(r.clean.Refused), refusedSet(again.Refused), "%s, then a re-run: %v", at, again.Refused)
				}
			})
		}
	}
}

// requireHonest checks a result against the drivers the functions are on.
func requireHonest(t *testing.T, at string, res *Result, got map[host.Address]string) {
	t.Helper()
	for _, a := range res.Actions {
		if got[a.Address] != a.To {
			t.Errorf("%s: reported %s moved to %q, it is on %q", at, a.Address, a.To, got[a.Address])
		}
	}
	for _, r := range res.Refused {
		for _, claim := range []string{"restored to ", "rolled back to "} {
			if _, rest, ok := strings.Cut(r.Reason, claim); ok {
				if want := fmt.Sprintf("%q", got[r.Address]); !strings.HasPrefix(rest, want) {
					t.Errorf("%s: %s reported %s%s, it is on %s", at, r.Address, claim, rest, want)
				}
			}
		}
	}
}

// TestRollbackKeepsAnAllocatedFunction: a workstation card returning to
// its host drivers; the GPU is back on nvidia when the audio function's
// probe fails for good, and by then the kubelet has allocated the GPU to
// a container. The rollback leaves the GPU on nvidia (never unbound from
// under the allocation) and says so; the audio function is restored to
// vfio-pci; the rest of the group was not attempted and stays.
func TestRollbackKeepsAnAllocatedFunction(t *testing.T) {
	const gpu, audio = host.Address("0000:01:00.0"), host.Address("0000:01:00.1")
	// Where the audio function's move starts in an uninterrupted unbind.
	k, h := prepareFault(t, "workstation", ToHost)
	Apply(context.Background(), h, planFor(t, h, allOf(host.VendorNVIDIA), ToHost), ApplyOptions{Sequential: true})
	n := 0
	for i, w := range k.Writes() {
		if w.Address == audio && strings.HasSuffix(w.Path, "drivers_probe") {
			n = i + 1
			break
		}
	}
	require.NotZero(t, n, "the audio function is probed in an unbind")

	k, h = prepareFault(t, "workstation", ToHost)
	uuid := hostsim.SimulatedGPUUUID(gpu)
	alloc := func(context.Context) (map[string][]podresources.Holder, error) {
		if k.DriverOf(gpu) != "nvidia" {
			return nil, nil // while the GPU is on vfio nothing holds it
		}
		return map[string][]podresources.Holder{podresources.NormID(uuid): {{Pod: "ml/train", Container: "c", Resource: "nvidia.com/gpu"}}}, nil
	}
	plan := planFor(t, h, allOf(host.VendorNVIDIA), ToHost)
	k.FailWrites(n, transientAttempts, syscall.EIO)
	res := Apply(context.Background(), h, plan, ApplyOptions{Sequential: true, Allocations: alloc})

	assert.Equal(t, "nvidia", k.DriverOf(gpu), "the allocated GPU is never unbound")
	assert.Equal(t, "vfio-pci", k.DriverOf(audio), "the audio function is restored to vfio-pci, not left driverless")
	reasons := map[host.Address]string{}
	for _, r := range res.Refused {
		reasons[r.Address] = r.Reason
	}
	assert.Contains(t, reasons[gpu], "rolling back")
	assert.Contains(t, reasons[gpu], "ml/train")
	assert.Contains(t, reasons[audio], `restored to "vfio-pci"`)
	assert.Contains(t, reasons[audio], "3 attempts")
	assert.Empty(t, res.Actions, "nothing is reported done in a failed group")
	requireHonest(t, "workstation", res, drivers(k))
	assert.Empty(t, k.Violations())
}
