package main

import (
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin/kubelettest"
)

// BenchmarkRSS: the plugin's resident memory on the simulated HGX host once
// registered (target: at most 20 MiB).
func BenchmarkRSS(b *testing.B) {
	dir := b.TempDir()
	kubelettest.BenchmarkRSS(b, "nvidia.com/GH100_H100_SXM5_80GB", "hgx-h100", "--permitted-host-devices-file", dir+"/permitted.json")
}
