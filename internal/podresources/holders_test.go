package podresources

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type lister map[string]PodAllocations

func (l lister) List(context.Context) (map[string]PodAllocations, error) { return l, nil }

func TestHoldersAndNormID(t *testing.T) {
	h, err := Holders(context.Background(), lister{
		"vms/b": {"compute": {"nvidia.com/GA102GL_A10": {"3b:00.0"}}},
		"ml/a":  {"main": {"nvidia.com/gpu": {"GPU-AbC::3", "1"}}, "side": {"nvidia.com/gpu": {"gpu-abc::1"}}},
	})
	require.NoError(t, err)
	assert.Equal(t, []Holder{{"vms/b", "compute", "nvidia.com/GA102GL_A10"}}, h["0000:3b:00.0"], "PCI addresses canonical")
	assert.Equal(t, []Holder{{"ml/a", "main", "nvidia.com/gpu"}, {"ml/a", "side", "nvidia.com/gpu"}}, h["gpu-abc"],
		"time-slicing replicas name the GPU they share, in pod and container order")
	assert.Len(t, h["1"], 1)
	assert.Equal(t, "pod vms/b container compute (nvidia.com/GA102GL_A10)", h["0000:3b:00.0"][0].String())
	assert.Equal(t, "gpu-abc", NormID(" GPU-ABC::12 "))
}
