package testutil

import (
	"testing"
	"time"
)

// ParallelVsSequential benchmarks a change that spans several parts (GPUs,
// IOMMU groups) done in parallel and sequentially, as sub-benchmarks named
// so. For each iteration, prepare (untimed) builds two runs on fresh hosts:
// one, the slowest part alone, and all, the whole change; only all is in
// the benchmark's time. It reports x-slowest-<part>, the whole's time over
// the part's alone (what parallelism buys: 1 is perfect), and ms/<op>.
func ParallelVsSequential(b *testing.B, part, op string, prepare func(b *testing.B, sequential bool) (one, all func() error)) {
	for _, mode := range []struct {
		name       string
		sequential bool
	}{{"parallel", false}, {"sequential", true}} {
		b.Run(mode.name, func(b *testing.B) {
			var whole, single time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				one, all := prepare(b, mode.sequential)
				start := time.Now()
				if err := one(); err != nil {
					b.Fatalf("the slowest %s alone: %v", part, err)
				}
				single += time.Since(start)
				b.StartTimer()

				start = time.Now()
				err := all()
				whole += time.Since(start)
				if err != nil {
					b.Fatalf("%s: %v", op, err)
				}
			}
			b.ReportMetric(float64(whole)/float64(single), "x-slowest-"+part)
			b.ReportMetric(float64(whole.Milliseconds())/float64(b.N), "ms/"+op)
		})
	}
}
