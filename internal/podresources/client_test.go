package podresources_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources/podresourcestest"
)

func TestClientAgainstAKubeletServer(t *testing.T) {
	kubelet := podresourcestest.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	require.NoError(t, kubelet.Start())
	defer func() { assert.NoError(t, kubelet.Stop()) }()
	kubelet.Allocate("vms", "vm-a", "compute", "nvidia.com/NVIDIA_A10-4Q", "5e1a0000-0000-4000-8000-000000000001")
	kubelet.Allocate("vms", "vm-b", "compute", "nvidia.com/NVIDIA_L40S-24Q", "0000:41:00.4", "0000:41:00.5")
	c, err := podresources.New(kubelet.Socket(), 2*time.Second)
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()

	all, err := c.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]podresources.PodAllocations{
		"vms/vm-a": {"compute": {"nvidia.com/NVIDIA_A10-4Q": {"5e1a0000-0000-4000-8000-000000000001"}}},
		"vms/vm-b": {"compute": {"nvidia.com/NVIDIA_L40S-24Q": {"0000:41:00.4", "0000:41:00.5"}}},
	}, all)

	one, err := c.Get(ctx, "vms", "vm-b")
	require.NoError(t, err)
	assert.Equal(t, []string{"0000:41:00.4", "0000:41:00.5"}, one["compute"]["nvidia.com/NVIDIA_L40S-24Q"])
	none, err := c.Get(ctx, "vms", "nope")
	require.NoError(t, err, "a pod the kubelet does not know has no allocation")
	assert.Empty(t, none)

	require.NoError(t, kubelet.Stop())
	short, err := podresources.New(kubelet.Socket(), 100*time.Millisecond)
	require.NoError(t, err)
	defer short.Close()
	_, err = short.List(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), kubelet.Socket(), "errors name the socket")
}
