package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
)

// TestMissingOSReleaseDegradesToVFIOPCI: a --proc-root without
// sys/kernel/osrelease (and no --modules-dir) used to fail even `status`.
// Now status and plan work, with plain vfio-pci for every function (no
// modules.alias to find the GH200's nvgrace_gpu_vfio_pci) and a logged
// warning; with osrelease present the variant driver is found.
func TestMissingOSReleaseDegradesToVFIOPCI(t *testing.T) {
	k, _ := hostsim.NewHost(t, "gh200")
	flags := simFlags(k, "status")
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := shell.Run(context.Background(), ProgramOn(k), append(args, flags...), shell.IO{Stdout: &out, Stderr: &errb})
		return code, out.String(), errb.String()
	}
	type status struct {
		Devices  []map[string]any `json:"devices"`
		Warnings []string         `json:"warnings"`
	}
	code, out, stderr := run("status", "--output", "json")
	require.Equal(t, 0, code, stderr)
	var st status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, "nvgrace_gpu_vfio_pci", st.Devices[0]["vfioDriver"], "with modules.alias")
	assert.Empty(t, st.Warnings)

	require.NoError(t, os.Remove(filepath.Join(k.Root(), "proc", "sys", "kernel", "osrelease")))
	flags = flags[:len(flags)-2] // no --modules-dir: found through the kernel release
	code, out, stderr = run("status", "--output", "json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	assert.Equal(t, "vfio-pci", st.Devices[0]["vfioDriver"])
	require.Len(t, st.Warnings, 2, "no aliases, vfio-pci's loadability unknown")
	assert.Contains(t, st.Warnings[0], "osrelease")
	assert.Contains(t, stderr, `"level":"WARN"`)
	assert.Contains(t, stderr, "using vfio-pci")

	code, out, stderr = run("plan", "--all", "--output", "json", "--pod-resources-socket=")
	require.Equal(t, 0, code, stderr)
	var plan change
	require.NoError(t, json.Unmarshal([]byte(out), &plan))
	require.NotEmpty(t, plan.Actions)
	for _, a := range plan.Actions {
		assert.Equal(t, "vfio-pci", a.To, a.Address)
	}
	assert.Contains(t, stderr, `"level":"WARN"`)
	assert.Contains(t, stderr, "osrelease")

	code, _, stderr = run("status", "--modules-dir", filepath.Join(t.TempDir(), "none"))
	assert.Equal(t, 0, code, stderr)
	assert.NotContains(t, stderr, "WARN", "--modules-dir needs no kernel release")
}
