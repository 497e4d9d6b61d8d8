package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/nri/gpucdi"
)

func TestGenerateFlagsLibAndBinDirs(t *testing.T) {
	var out bytes.Buffer
	c, err := parseGenerateFlags(nil, &out)
	require.NoError(t, err)
	assert.Equal(t, gpucdi.DefaultLibDirs(), c.opts.LibDirs)
	assert.Equal(t, gpucdi.DefaultBinDirs(), c.opts.BinDirs)
	assert.Equal(t, []string{"/etc/cdi", "/var/run/cdi"}, c.others)

	c, err = parseGenerateFlags([]string{
		"--lib-dir", "/opt/nvidia/lib", "--lib-dir", "/usr/lib32",
		"--bin-dir", "/opt/nvidia/bin",
		"--driver-root", "/run/nvidia/driver", "--cdi-dir", "/tmp/cdi",
	}, &out)
	require.NoError(t, err)
	assert.Equal(t, []string{"/opt/nvidia/lib", "/usr/lib32"}, c.opts.LibDirs, "the first use replaces the defaults")
	assert.Equal(t, []string{"/opt/nvidia/bin"}, c.opts.BinDirs)
	assert.Equal(t, "/run/nvidia/driver", c.opts.DriverRoot)
	assert.Equal(t, "/tmp/cdi", c.dir)

	_, err = parseGenerateFlags([]string{"--lib-dir", ""}, &out)
	require.Error(t, err)

	out.Reset()
	err = mainErr(context.Background(), []string{"generate-cdi", "--help"}, &out, &out)
	require.True(t, errors.Is(err, flag.ErrHelp))
	for _, f := range []string{"-lib-dir", "-bin-dir", "-driver-root", "-check-cdi-dir"} {
		assert.Contains(t, out.String(), f)
	}
}

func TestGenerateSearchesTheLibDirs(t *testing.T) {
	root := t.TempDir()
	var out bytes.Buffer
	err := mainErr(context.Background(), []string{
		"generate-cdi", "--cdi-dir", t.TempDir(), "--check-cdi-dir", t.TempDir(), "--driver-root", root,
		"--lib-dir", "/opt/a", "--lib-dir", "/opt/b",
	}, &out, &out)
	require.Error(t, err)
	if !withCGO {
		require.ErrorContains(t, err, "built without cgo")
		return
	}
	require.ErrorContains(t, err, "libnvidia-ml.so.1 not found under driver root "+root+" (searched /opt/a, /opt/b)")

	err = mainErr(context.Background(), []string{
		"generate-cdi", "--cdi-dir", t.TempDir(), "--check-cdi-dir", t.TempDir(), "--driver-root", root,
	}, &out, &out)
	require.ErrorContains(t, err, "(searched "+strings.Join(gpucdi.DefaultLibDirs(), ", ")+")")
}
