package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The demo is itself a check of the whole story; here it runs against the
// same envtest assets as the other suites.
func TestStory(t *testing.T) {
	assets := testutil.EnvtestAssets(t)
	root := ".."
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := Run(ctx, Options{Assets: assets, Out: &out, WorkDir: t.TempDir(),
		CRDDirs:    []string{filepath.Join(root, "manifests", "crds"), filepath.Join(root, "operator", "controllers", "testdata", "crds")},
		PolicyFile: filepath.Join(root, "manifests", "samples", "policy.yaml")})
	require.NoError(t, err, out.String())
	assert.NotContains(t, out.String(), "FAILED")
	rows := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) == 8 {
			rows[f[0]] = strings.Join(f[1:], " ")
		}
	}
	assert.Equal(t, "container ready 0 0 0 - -", rows["gpu-a10"], "relabelled container: its GPU back on nvidia")
	assert.Equal(t, "vm-passthrough ready 4 4 0 - nvidia.com/GH100_H100_SXM5_80GB=4", rows["gpu-hgx"], "mixed: 4 GPUs for VMs")
	assert.Equal(t, "vm-vgpu ready 0 0 3 A10-8Q=success nvidia.com/NVIDIA_A10-8Q=3", rows[vgpuA10])
	assert.Equal(t, "vm-vgpu ready 0 0 8 L40S-12Q=success nvidia.com/NVIDIA_L40S-12Q=8", rows[vgpuL40S])
	assert.Equal(t, "container ready 0 0 0 - -", rows["gpu-ctr"])
	assert.Equal(t, "- - - - - - -", rows["cpu-only"])
	assert.Len(t, rows, len(nodes), "the table's rows")
}
