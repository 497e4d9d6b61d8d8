package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
)

// systemPCIIDs is Debian's pci.ids (apt-get install pci.ids), the file the
// issue measured: 1.3 MB, ~37,000 lines, ~1,750 NVIDIA devices.
const systemPCIIDs = "/usr/share/misc/pci.ids"

// BenchmarkRSS: the plugin's resident memory on the simulated HGX host once
// registered (target: at most 20 MiB), without pci.ids (an empty file) and
// with the system pci.ids, read in one pass that keeps only NVIDIA's names.
func BenchmarkRSS(b *testing.B) {
	empty := filepath.Join(b.TempDir(), "pci.ids")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, ids string }{{"pci.ids=none", empty}, {"pci.ids=system", systemPCIIDs}} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := os.Stat(c.ids); err != nil {
				b.Fatalf("%v: install it with apt-get install pci.ids", err)
			}
			dir := b.TempDir()
			kubelettest.BenchmarkRSS(b, "nvidia.com/GH100_H100_SXM5_80GB", "hgx-h100",
				"--permitted-host-devices-file", dir+"/permitted.json", "--pci-ids", c.ids)
		})
	}
}
