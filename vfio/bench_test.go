package vfio

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/jsonout"
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
	for _, mode := range []struct {
		name string
		opts ApplyOptions
	}{{"parallel", ApplyOptions{}}, {"sequential", ApplyOptions{Sequential: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			var whole, single time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				k, h := buildFixture(b, "hgx-h100")
				slowGPUUnbind(k)
				plan := planFor(b, h, allOf(host.VendorNVIDIA), ToVFIO)
				k1, h1 := buildFixture(b, "hgx-h100")
				slowGPUUnbind(k1)
				one := planFor(b, h1, Selection{Devices: []host.Address{"0000:18:00.0"}, Vendor: host.VendorNVIDIA}, ToVFIO)
				start := time.Now()
				if r := Apply(context.Background(), h1, one, mode.opts); !r.OK() {
					b.Fatalf("single group: %v", r.Refused)
				}
				single += time.Since(start)
				b.StartTimer()

				start = time.Now()
				res := Apply(context.Background(), h, plan, mode.opts)
				whole += time.Since(start)
				if !res.OK() || len(res.Actions) != 12 {
					b.Fatalf("bind: %d actions, refused %v", len(res.Actions), res.Refused)
				}
			}
			b.ReportMetric(float64(whole)/float64(single), "x-slowest-group")
			b.ReportMetric(float64(whole.Milliseconds())/float64(b.N), "ms/bind")
		})
	}
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
