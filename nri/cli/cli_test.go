package cli

import (
	"bytes"
	"context"
	"flag"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/nri"
	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

func TestMain(m *testing.M) { nritest.Main(m) }

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

// TestSkipDefaultRuntimeHandler: --skip-runtime-handler "" (the default
// runtime, whose handler is empty, where Kata is the default runtime) was
// refused as an empty value although the help says to pass it. It is
// accepted, and the first use still replaces the default kata*.
func TestSkipDefaultRuntimeHandler(t *testing.T) {
	parse := func(args ...string) *options {
		t.Helper()
		o := defaults()
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		o.register(fs)
		require.NoError(t, fs.Parse(args))
		return o
	}
	assert.Equal(t, []string{"kata*"}, parse().skip.vals)
	assert.Equal(t, []string{""}, parse("--skip-runtime-handler", "").skip.vals, "the first use replaces the default")
	assert.Equal(t, []string{"kata*", ""}, parse("--skip-runtime-handler", "kata*", "--skip-runtime-handler", "").skip.vals)
	assert.Equal(t, []string{"", "kata*"}, parse("--skip-runtime-handler=", "--skip-runtime-handler=kata*").skip.vals)

	o, err := parseConfig("--skip-runtime-handler=kata* --skip-runtime-handler=")
	require.NoError(t, err, "a pre-registered plugin's config file says it with an empty value after =")
	assert.Equal(t, []string{"kata*", ""}, o.skip.vals)

	h := host.New(host.Options{ProcRoot: t.TempDir()})
	no, _, pods, err := build(parse("--skip-runtime-handler", "", "--cdi-dir", t.TempDir(), "--pod-resources-socket", "/nonexistent.sock"), h, "/dev", logr.Discard())
	require.NoError(t, err)
	defer pods.Close()
	assert.Equal(t, []string{""}, no.SkipRuntimeHandlers)
	assert.Empty(t, no.KataRuntimeHandlers)

	// Kata's handlers named (the operator passes its RuntimeClass's handler):
	// only they are skipped, the kata* pattern is gone unless asked for again.
	no, _, pods2, err := build(parse("--kata-runtime-handler", "kata-qemu-nvidia-gpu", "--cdi-dir", t.TempDir(), "--pod-resources-socket", "/nonexistent.sock"), h, "/dev", logr.Discard())
	require.NoError(t, err)
	defer pods2.Close()
	assert.Equal(t, []string{"kata-qemu-nvidia-gpu"}, no.KataRuntimeHandlers)
	assert.Empty(t, no.SkipRuntimeHandlers, "the default kata* pattern no longer applies")
	no, _, pods3, err := build(parse("--kata-runtime-handler", "kq", "--skip-runtime-handler", "gvisor*", "--cdi-dir", t.TempDir(), "--pod-resources-socket", "/nonexistent.sock"), h, "/dev", logr.Discard())
	require.NoError(t, err)
	defer pods3.Close()
	assert.Equal(t, []string{"gvisor*"}, no.SkipRuntimeHandlers, "patterns given stay")
	assert.Equal(t, nri.DefaultDriverRoots, no.DriverRoots)

	for _, other := range []string{"--cdi-dir", "--resource", "--annotation-namespace"} {
		_, err := parseConfig(other + "=")
		assert.ErrorContains(t, err, "empty value", "%s stays non-empty", other)
	}
	code, out := runPlugin(t, "--skip-runtime-handler", "", "--plugin-index", "7")
	assert.Equal(t, 1, code)
	assert.NotContains(t, out, "empty value")
	assert.Contains(t, out, "want two digits", "got past the flags")
}
