package cli

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

func TestMain(m *testing.M) {
	nritest.QuietNRI()
	os.Exit(m.Run())
}

func runPlugin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := shell.Run(context.Background(), Program(), args, shell.IO{Stdout: &out, Stderr: &out})
	return code, out.String()
}

func TestFlags(t *testing.T) {
	code, out := runPlugin(t, "--help")
	require.Equal(t, 0, code)
	for _, f := range []string{"-nri-socket", "-pod-resources-socket", "-cdi-dir", "-resource", "-cdi-kind", "-plugin-index", "-fail-open", "-sysfs-root", "-health-addr", "generate-cdi"} {
		assert.Contains(t, out, f)
	}
	code, out = runPlugin(t, "--plugin-index", "7", "--pod-resources-socket", "/nonexistent")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `--plugin-index "7": want two digits`)
	code, out = runPlugin(t, "--injection", "magic", "--nri-socket", "/nonexistent/nri.sock")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `magic`)
	code, out = runPlugin(t, "extra")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `unexpected argument "extra"`)

	l := list("a", "b")
	require.NoError(t, l.Set("c"))
	require.NoError(t, l.Set("d"))
	assert.Equal(t, []string{"c", "d"}, l.vals, "the first use replaces the defaults")
	require.Error(t, l.Set(""))
}

// TestConfigFile: a pre-registered plugin's config file holds the same
// flags, whitespace-separated; the shell's own flags are accepted there.
func TestConfigFile(t *testing.T) {
	o, err := parseConfig("--pod-resources-socket /k.sock\n--cdi-dir /a --cdi-dir /b -v=2 --sysfs-root /sys --fail-open")
	require.NoError(t, err)
	assert.Equal(t, "/k.sock", o.podResources)
	assert.Equal(t, []string{"/a", "/b"}, o.cdiDirs.vals)
	assert.True(t, o.failOpen)
	_, err = parseConfig("--plugin-index 123")
	require.ErrorContains(t, err, "want two digits")
	_, err = parseConfig("--frob")
	require.ErrorContains(t, err, "plugin config")
	_, err = parseConfig("stray")
	require.ErrorContains(t, err, `"stray"`)
}

func TestGenerateKeepsAnotherSpec(t *testing.T) {
	dir := t.TempDir()
	nritest.WriteSpec(t, dir, "nvidia-ctk", nritest.GPUSpec(1, true))
	code, out := runPlugin(t, "generate-cdi", "--cdi-dir", dir, "--check-cdi-dir", dir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "kept the existing spec for nvidia.com/gpu")
	code, out = runPlugin(t, "generate-cdi", "--cdi-dir", dir, "--check-cdi-dir", t.TempDir(), "--driver-root", t.TempDir())
	assert.Equal(t, 1, code)
	if withCGO {
		assert.Contains(t, out, "libnvidia-ml.so.1 not found under driver root")
	} else {
		assert.Contains(t, out, "built without cgo")
	}
}
