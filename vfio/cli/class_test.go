package cli

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClassLimitsAll: --class keeps --all to functions of those PCI
// classes (what the policy's pciClasses pass for a vendor other than
// NVIDIA): on the HGX host, 0302 takes the eight 3D-controller GPUs and
// none of the four NVSwitches (class 0680) even with --nvswitches; both
// classes take all twelve. A bad class is bad usage naming the value, for
// plan and for the daemon (exit 1, as any bad flag).
func TestClassLimitsAll(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		actions int
	}{
		{[]string{"--class", "0302"}, 8},
		{[]string{"--class", "03"}, 8},
		{[]string{"--class", "0x0302", "--class", "0680"}, 12},
		{[]string{"--class", "0200"}, 0},
	} {
		args := append([]string{"plan", "--all", "--nvswitches", "--simulate", "hgx-h100", "--output", "json"}, tc.args...)
		code, out, stderr := runCLI(t, args...)
		require.Equal(t, 0, code, "%v: %s", tc.args, stderr)
		var c change
		require.NoError(t, json.Unmarshal([]byte(out), &c), out)
		assert.Len(t, c.Actions, tc.actions, "%v", tc.args)
	}
	for _, args := range [][]string{
		{"plan", "--all", "--class", "3", "--simulate", "hgx-h100"},
		{"plan", "--all", "--class", "03zz", "--simulate", "hgx-h100"},
		{"daemon", "--release", "--class", "030", "--ready-dir", "", "--simulate", "hgx-h100"},
	} {
		code, _, stderr := runCLI(t, args...)
		assert.Equal(t, 1, code, "%v: %s", args, stderr)
		assert.Contains(t, stderr, "--class", "%v", args)
		assert.Contains(t, stderr, args[3], "the bad value named: %v", args)
	}
}
