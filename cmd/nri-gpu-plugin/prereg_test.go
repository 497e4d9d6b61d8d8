package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

// TestPreregistered runs the binary the way a runtime starts a plugin from
// its plugin dir (NN-name, the connection handed over, no arguments), with
// its settings in NN-name.conf, through NRI's real runtime side.
func TestPreregistered(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildPlugin(t)
	dir := kubelettest.ShortDir(t)
	cdiDir := t.TempDir()
	nritest.WriteSpec(t, cdiDir, "nvidia", nritest.GPUSpec(3, false))
	kubelet := nritest.StartPodResources(t, dir)
	kubelet.Allocate("ml", "train", "main", "nvidia.com/gpu", "1")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "plugins"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "conf"), 0o755))
	b, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugins", "05-gpu"), b, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "conf", "05-gpu.conf"),
		[]byte("--pod-resources-socket "+kubelet.Socket()+"\n--cdi-dir "+cdiDir+"\n"), 0o644))

	rt := nritest.StartRuntime(t, dir, "v2.4.2") // starts and synchronizes pre-installed plugins
	sb := &api.PodSandbox{Id: "sb-1", Name: "train", Namespace: "ml", Linux: &api.LinuxPodSandbox{}}
	a, err := rt.Create(sb, &api.Container{Id: "c-1", Name: "main", Linux: &api.LinuxContainer{}})
	require.NoError(t, err)
	require.NotEmpty(t, a.GetCDIDevices(), "the pre-registered plugin injected nothing")
	assert.Equal(t, "nvidia.com/gpu=1", a.GetCDIDevices()[0].GetName())
}
