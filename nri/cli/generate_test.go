package cli

import (
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
)

func parseGenerate(t *testing.T, args ...string) generateConfig {
	t.Helper()
	var c generateConfig
	fs := flag.NewFlagSet("generate-cdi", flag.ContinueOnError)
	generateFlags(fs, &c)
	require.NoError(t, fs.Parse(args))
	return c
}

func TestGenerateFlagsLibAndBinDirs(t *testing.T) {
	c := parseGenerate(t)
	assert.Equal(t, gpucdi.DefaultLibDirs(), c.libDirs.vals)
	assert.Equal(t, gpucdi.DefaultBinDirs(), c.binDirs.vals)
	assert.Equal(t, []string{"/etc/cdi", "/var/run/cdi"}, c.others.vals)

	c = parseGenerate(t, "--lib-dir", "/opt/nvidia/lib", "--lib-dir", "/usr/lib32",
		"--bin-dir", "/opt/nvidia/bin",
		"--driver-root", "/run/nvidia/driver", "--cdi-dir", "/tmp/cdi")
	assert.Equal(t, []string{"/opt/nvidia/lib", "/usr/lib32"}, c.libDirs.vals, "the first use replaces the defaults")
	assert.Equal(t, []string{"/opt/nvidia/bin"}, c.binDirs.vals)
	assert.Equal(t, "/run/nvidia/driver", c.opts.DriverRoot)
	assert.Equal(t, "/tmp/cdi", c.dir)

	code, _ := runPlugin(t, "generate-cdi", "--lib-dir", "")
	assert.Equal(t, 1, code)

	code, out := runPlugin(t, "generate-cdi", "--help")
	require.Equal(t, 0, code)
	for _, f := range []string{"-lib-dir", "-bin-dir", "-driver-root", "-check-cdi-dir", "-dev-root", "-proc-root"} {
		assert.Contains(t, out, f)
	}
}

func TestGenerateSearchesTheLibDirs(t *testing.T) {
	root := t.TempDir()
	code, out := runPlugin(t, "generate-cdi", "--cdi-dir", t.TempDir(), "--check-cdi-dir", t.TempDir(), "--driver-root", root,
		"--lib-dir", "/opt/a", "--lib-dir", "/opt/b")
	require.Equal(t, 1, code)
	if !withCGO {
		require.Contains(t, out, "built without cgo")
		return
	}
	require.Contains(t, out, "libnvidia-ml.so.1 not found under driver root "+root+" (searched /opt/a, /opt/b)")

	_, out = runPlugin(t, "generate-cdi", "--cdi-dir", t.TempDir(), "--check-cdi-dir", t.TempDir(), "--driver-root", root)
	require.Contains(t, out, "(searched "+strings.Join(gpucdi.DefaultLibDirs(), ", ")+")")
}
