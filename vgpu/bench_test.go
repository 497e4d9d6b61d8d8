package vgpu

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
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
      vgpu-devices: {"T4-4Q": 4}
  one:
    - devices: [0]
      vgpu-devices: {"T4-4Q": 4}
`

// BenchmarkApply8GPUs applies 32 vGPUs on 8 simulated T4s (4 each, 150 ms
// per create). Each iteration also applies the same 4 vGPUs on one GPU
// alone; x-slowest-gpu is the whole apply's time over that GPU's (target:
// parallel at most 1.3).
func BenchmarkApply8GPUs(b *testing.B) {
	cfg := parse(b, benchConfig)
	testutil.ParallelVsSequential(b, "gpu", "apply", func(b *testing.B, sequential bool) (one, all func() error) {
		opts := ApplyOptions{Sequential: sequential}
		k1, h1 := fixture(b, "t4x8-vgpu")
		vgpuLatency(k1)
		single := planOf(b, h1, cfg, "one", Options{})
		k, h := fixture(b, "t4x8-vgpu")
		vgpuLatency(k)
		plan := planOf(b, h, cfg, "all", Options{})
		one = func() error {
			if r := Apply(context.Background(), h1, single, opts); !r.OK() {
				return fmt.Errorf("refused %v", r.Refused)
			}
			return nil
		}
		all = func() error {
			if r := Apply(context.Background(), h, plan, opts); !r.OK() || len(k.Writes()) != 32 {
				return fmt.Errorf("%d writes (want 32), refused %v", len(k.Writes()), r.Refused)
			}
			return nil
		}
		return one, all
	})
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
