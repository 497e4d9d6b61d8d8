package vfio

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/jsonout"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// gpuUnbindLatency is the simulated time a GPU takes to leave the nvidia
// driver (teardown of the GPU's state in the driver).
const gpuUnbindLatency = 200 * time.Millisecond

func slowGPUUnbind(k *hostsim.Kernel) {
	k.SetLatency(func(w hostsim.Write) time.Duration {
		if strings.HasSuffix(w.Path, "/unbind") && strings.Contains(w.Path, "drivers/nvidia/") {
			return gpuUnbindLatency
		}
		return 0
	})
}

// BenchmarkBindHGX binds the HGX fixture (8 GPUs + 4 NVSwitches, each in
// its own group) with a 200 ms unbind per GPU and NVSwitch, in parallel and
// sequentially. Each iteration also binds the single slowest group alone;
// x-slowest-group is the whole bind's time over that group's time (target:
// parallel at most 1.3).
func BenchmarkBindHGX(b *testing.B) {
	testutil.ParallelVsSequential(b, "group", "bind", func(b *testing.B, sequential bool) (one, all func() error) {
		opts := ApplyOptions{Sequential: sequential}
		k1, h1 := buildFixture(b, "hgx-h100")
		slowGPUUnbind(k1)
		single := planFor(b, h1, Selection{Devices: []host.Address{"0000:18:00.0"}, Vendor: host.VendorNVIDIA}, ToVFIO)
		k, h := buildFixture(b, "hgx-h100")
		slowGPUUnbind(k)
		plan := planFor(b, h, allOf(host.VendorNVIDIA), ToVFIO)
		one = func() error {
			if r := Apply(context.Background(), h1, single, opts); !r.OK() {
				return fmt.Errorf("refused %v", r.Refused)
			}
			return nil
		}
		all = func() error {
			if r := Apply(context.Background(), h, plan, opts); !r.OK() || len(r.Actions) != 12 {
				return fmt.Errorf("%d actions (want 12), refused %v", len(r.Actions), r.Refused)
			}
			return nil
		}
		return one, all
	})
}

// BenchmarkStatusHGX is `vfio-manager status --output json` on the HGX
// fixture: one scan and the report (target: under 5 ms).
func BenchmarkStatusHGX(b *testing.B) {
	_, h := buildFixture(b, "hgx-h100")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		snap, err := h.Scan()
		if err != nil {
			b.Fatal(err)
		}
		rep, err := Status(h, snap, host.VendorNVIDIA)
		if err != nil {
			b.Fatal(err)
		}
		if err := jsonout.Write(io.Discard, rep); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanHGX is `vfio-manager plan --all --nvswitches` on the HGX
// fixture: scan, usage scan, aliases and the plan.
func BenchmarkPlanHGX(b *testing.B) {
	_, h := buildFixture(b, "hgx-h100")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := NewPlanner(h)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Plan(allOf(host.VendorNVIDIA), ToVFIO); err != nil {
			b.Fatal(err)
		}
	}
}
