package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

// TestSimulateRunsTheBinariesOnTheirRootFlags: simulate runs each node
// binary on a bundled host through its ordinary root flags and its own
// flags, no simulated-host option of the shell: the VFIO manager binds
// through the simulated kernel, the vGPU device manager creates vGPUs, the
// KubeVirt plugin reads the bound GPU.
func TestSimulateRunsTheBinariesOnTheirRootFlags(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := shell.Run(context.Background(), program(), append([]string{"simulate"}, args...), shell.IO{Stdout: &out, Stderr: &errb})
		return code, out.String(), errb.String()
	}
	var change struct {
		Actions []struct{ Address, To string } `json:"actions"`
	}
	code, out, stderr := run("a10", "vfio-manager", "bind", "--all", "--output", "json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &change), out)
	require.NotEmpty(t, change.Actions)
	assert.Equal(t, "vfio-pci", change.Actions[0].To)

	code, out, stderr = run("a10", "vfio-manager", "status")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "0000:3b:00.0")

	code, out, stderr = run("a10", "kubevirt-device-plugin", "--print-permitted-host-devices")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "nvidia.com/GA102GL_A10")

	code, out, stderr = run("a10-vgpu", "vgpu-device-manager", "apply", "--selected", "A10-4Q", "--output", "json")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, `"create"`)

	code, _, _ = run("a10", "vfio-manager")
	assert.Equal(t, 1, code, "no command: bad usage")
}
