package host_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
)

func TestNoFunctionNamesTheFolder(t *testing.T) {
	sys := filepath.Join(t.TempDir(), "sys")
	err := host.New(host.Options{SysfsRoot: sys}).NoFunction("0000:99:00.0")
	var missing *host.NoFunctionError
	require.True(t, errors.As(err, &missing))
	assert.Equal(t, host.Address("0000:99:00.0"), missing.Address)
	assert.Equal(t, "no PCI function 0000:99:00.0 under "+filepath.Join(sys, "bus", "pci", "devices"), err.Error())
}
