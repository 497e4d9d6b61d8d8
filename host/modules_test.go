package host_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

func TestAliasesAndModulesDir(t *testing.T) {
	k, h := hostsim.NewHost(t, "a10")
	as, err := h.Aliases()
	require.NoError(t, err)
	assert.Contains(t, as, host.Alias{Pattern: "vfio_pci:v*d*sv*sd*bc*sc*i*", Module: "vfio_pci"})

	o := k.Options()
	o.ModulesDir = ""
	dir, err := host.New(o).ModulesDir()
	require.NoError(t, err)
	assert.Equal(t, "/lib/modules/6.1.0-sim-amd64", dir)
	rel, err := host.New(o).KernelRelease()
	require.NoError(t, err)
	assert.Equal(t, "6.1.0-sim-amd64", rel)

	o.ModulesDir = t.TempDir() // no modules.alias at all
	as, err = host.New(o).Aliases()
	require.NoError(t, err)
	assert.Empty(t, as)

	testutil.WriteFile(t, filepath.Join(o.ModulesDir, "modules.alias"), "alias pci:v*\n")
	_, err = host.New(o).Aliases()
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(o.ModulesDir, "modules.alias"))
	assert.Contains(t, err.Error(), "line 1")

	testutil.WriteFile(t, filepath.Join(k.Root(), "proc", "sys", "kernel", "osrelease"), "../../etc\n")
	o.ModulesDir = ""
	_, err = host.New(o).ModulesDir()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "osrelease")
	assert.NotErrorIs(t, err, host.ErrNoKernelRelease, "an invalid release is not a missing one")

	require.NoError(t, os.Remove(filepath.Join(k.Root(), "proc", "sys", "kernel", "osrelease")))
	_, err = host.New(o).Aliases()
	require.ErrorIs(t, err, host.ErrNoKernelRelease)
	assert.Contains(t, err.Error(), filepath.Join(k.Root(), "proc", "sys", "kernel", "osrelease"))
}
