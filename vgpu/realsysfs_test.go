package vgpu

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/internal/vgpuconfig"
)

type refuseWrites struct{ n int }

func (r *refuseWrites) WriteFile(string, []byte) error {
	r.n++
	return errors.New("this test never writes to the real sysfs")
}

// TestPlanRealSysfs reads this machine's own /sys and plans the built-in
// default: the readers cope with a real tree, and planning writes nothing.
// On a GPU host without the vGPU host driver the default is a config
// error naming the GPU; on a host with no NVIDIA GPU there is nothing to do.
func TestPlanRealSysfs(t *testing.T) {
	if entries, err := os.ReadDir("/sys/bus/pci/devices"); err != nil || len(entries) == 0 {
		t.Skipf("no PCI functions in /sys/bus/pci/devices on this machine (%v)", err)
	}
	w := &refuseWrites{}
	h := host.New(host.Options{Writer: w})
	gpus, err := Inventory(h, nil)
	require.NoError(t, err)
	for i, g := range gpus {
		assert.Equal(t, i, g.Index)
		t.Logf("%s: backend %s, %d types, %d vGPUs", g.Describe(), g.Backend, len(g.Types), len(g.VGPUs))
	}
	def, err := vgpuconfig.Default()
	require.NoError(t, err)
	p, err := PlanConfig(t.Context(), h, def, vgpuconfig.DefaultName, Options{NodeName: "real"})
	if err != nil {
		assert.True(t, vgpuconfig.IsError(err), "%v", err)
		t.Logf("plan: %v", err)
	} else {
		assert.Len(t, p.GPUs, len(gpus))
	}
	assert.Zero(t, w.n)
}
