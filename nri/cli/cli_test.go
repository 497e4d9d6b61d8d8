package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

func TestMain(m *testing.M) {
	nritest.QuietNRI()
	os.Exit(m.Run())
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	err := mainErr(context.Background(), []string{"--help"}, &out, &out)
	require.True(t, errors.Is(err, flag.ErrHelp))
	for _, f := range []string{"-nri-socket", "-pod-resources-socket", "-cdi-dir", "-resource", "-cdi-kind", "-plugin-index", "-fail-open"} {
		assert.Contains(t, out.String(), f)
	}
	err = mainErr(context.Background(), []string{"--plugin-index", "7", "--pod-resources-socket", "/nonexistent"}, &out, &out)
	require.ErrorContains(t, err, `--plugin-index "7": want two digits`)
	err = mainErr(context.Background(), []string{"--injection", "magic"}, &out, &out)
	require.ErrorContains(t, err, `"magic"`)
	err = mainErr(context.Background(), []string{"extra"}, &out, &out)
	require.ErrorContains(t, err, `unexpected argument "extra"`)

	l := list("a", "b")
	require.NoError(t, l.Set("c"))
	require.NoError(t, l.Set("d"))
	assert.Equal(t, []string{"c", "d"}, l.vals, "the first use replaces the defaults")
	require.Error(t, l.Set(""))
}

func TestGenerateKeepsAnotherSpec(t *testing.T) {
	dir := t.TempDir()
	nritest.WriteSpec(t, dir, "nvidia-ctk", nritest.GPUSpec(1, true))
	var out bytes.Buffer
	require.NoError(t, mainErr(context.Background(), []string{"generate-cdi", "--cdi-dir", dir, "--check-cdi-dir", dir}, &out, &out))
	assert.Contains(t, out.String(), "kept the existing spec for nvidia.com/gpu")
	out.Reset()
	err := mainErr(context.Background(), []string{"generate-cdi", "--cdi-dir", dir, "--check-cdi-dir", t.TempDir(), "--driver-root", t.TempDir()}, &out, &out)
	if withCGO {
		require.ErrorContains(t, err, "libnvidia-ml.so.1 not found under driver root")
	} else {
		require.ErrorContains(t, err, "built without cgo")
	}
}
