package vgpu

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
)

// Simulated time NVIDIA's vGPU host driver takes per write: making a vGPU
// allocates its framebuffer and channels on the GPU; destroying one frees
// them; enabling VFs probes each one.
const (
	createLatency   = 150 * time.Millisecond
	removeLatency   = 100 * time.Millisecond
	sriovVFsLatency = time.Second
)

func vgpuLatency(k *hostsim.Kernel) {
	k.SetLatency(func(w hostsim.Write) time.Duration {
		switch {
		case strings.HasSuffix(w.Path, "/create"):
			return createLatency
		case strings.HasSuffix(w.Path, "/remove"):
			return removeLatency
		case strings.HasSuffix(w.Path, "/current_vgpu_type"):
			if strings.TrimSpace(w.Data) == "0" {
				return removeLatency
			}
			return createLatency
		case strings.HasSuffix(w.Path, "/sriov_numvfs"):
			return sriovVFsLatency
		}
		return 0
	})
}

const benchConfig = `version: v1
vgpu-configs:
  all:
    - devices: all
      vgpu-devices: {"A10-6Q": 4}
  one:
    - devices: [0]
      vgpu-devices: {"A10-6Q": 4}
`

// BenchmarkApply8GPUs applies 32 vGPUs on 8 simulated A10s (4 each, 150 ms
// per create). Each iteration also applies the same 4 vGPUs on one GPU
// alone; x-slowest-gpu is the whole apply's time over that GPU's (target:
// parallel at most 1.3).
func BenchmarkApply8GPUs(b *testing.B) {
	cfg := parse(b, benchConfig)
	for _, mode := range []struct {
		name string
		opts ApplyOptions
	}{{"parallel", ApplyOptions{}}, {"sequential", ApplyOptions{Sequential: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			var whole, single time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				k1, h1 := fixture(b, "a10x8-vgpu")
				vgpuLatency(k1)
				one := planOf(b, h1, cfg, "one", Options{})
				start := time.Now()
				if r := Apply(context.Background(), h1, one, mode.opts); !r.OK() {
					b.Fatalf("one GPU: %v", r.Refused)
				}
				single += time.Since(start)
				k, h := fixture(b, "a10x8-vgpu")
				vgpuLatency(k)
				plan := planOf(b, h, cfg, "all", Options{})
				b.StartTimer()

				start = time.Now()
				res := Apply(context.Background(), h, plan, mode.opts)
				whole += time.Since(start)
				if !res.OK() || len(k.Writes()) != 32 {
					b.Fatalf("apply: %d writes, refused %v", len(k.Writes()), res.Refused)
				}
			}
			b.ReportMetric(float64(whole)/float64(single), "x-slowest-gpu")
			b.ReportMetric(float64(whole.Milliseconds())/float64(b.N), "ms/apply")
		})
	}
}

// BenchmarkPlanL40S is `vgpu-device-manager plan` on two L40S with their
// 64 VFs enabled and vGPUs on them: inventory, usage scan and the plan.
func BenchmarkPlanL40S(b *testing.B) {
	cfg := parse(b, testConfig)
	_, h := fixture(b, "l40s-vgpu")
	if r := apply(b, h, cfg, "small", Options{}, ApplyOptions{}); !r.OK() {
		b.Fatal(r.Refused)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := PlanConfig(context.Background(), h, cfg, "default", Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
