package main

import (
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
)

// BenchmarkRSS: the plugin's resident memory on the simulated HGX host once
// registered (target: at most 20 MiB).
func BenchmarkRSS(b *testing.B) {
	kubelettest.BenchmarkRSS(b, "nvidia.com/pgpu", "hgx-h100", "--cdi-dir", b.TempDir())
}
