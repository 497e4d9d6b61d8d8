package cli

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDaemonRefusesNoVendor: vendor 0000 (or ffff) is no PCI vendor; in
// the daemon's desired state zero means NVIDIA, so it must not pass for it.
func TestDaemonRefusesNoVendor(t *testing.T) {
	for _, v := range []string{"0", "0000", "0xffff", "nvidia"} {
		code, _, stderr := runCLI(t, "daemon", "--vendor", v, "--ready-dir", "", "--simulate", "a10")
		assert.Equal(t, 1, code, "%s: %s", v, stderr)
		assert.Contains(t, stderr, "--vendor", v)
	}
}
