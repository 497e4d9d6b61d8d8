package nri

import (
	"context"

	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
	"github.com/sandbox-gpu/sandbox-gpu/nri/nritest"
)

// TestPlantedSpecWithAHookIsRefused: a compromised CDI writer on the node
// plants an nvidia.com/gpu spec with a hook of its own in the folder that
// outranks the real one; the container is refused, naming the hook, so no
// runtime ever runs it. NVIDIA's own hooks pass; HooksNone refuses them too.
func TestPlantedSpecWithAHookIsRefused(t *testing.T) {
	dir := kubelettest.ShortDir(t)
	etc, run := t.TempDir(), t.TempDir() // /etc/cdi, then /var/run/cdi: the later outranks
	nritest.WriteSpec(t, etc, "nvidia", nritest.GPUSpec(2, true))
	kubelet := nritest.StartPodResources(t, dir)
	rt := nritest.StartRuntime(t, dir, "v2.4.2")
	start := func(policy string) {
		res, err := NewResolver("nvidia.com/gpu", []string{etc, run})
		require.NoError(t, err)
		pods, err := NewKubeletPodResources(kubelet.Socket(), time.Second)
		require.NoError(t, err)
		t.Cleanup(func() { _ = pods.Close() })
		p, err := New(Options{Hooks: policy, Log: logr.Discard()}, res, pods, nil)
		require.NoError(t, err)
		stop := runPlugin(t, p, rt)
		t.Cleanup(stop)
	}
	start(HooksNVIDIA)
	rt.WaitJoined(t, 1, 10*time.Second)

	kubelet.Allocate("ml", "train", "main", "nvidia.com/gpu", "0")
	a, err := rt.Create(pod("ml", "train", "runc"), ctr("main", nil))
	require.NoError(t, err, "nvidia-ctk's own hook at its installed path is allowed")
	assert.Equal(t, []string{"nvidia.com/gpu=0"}, cdiNames(a))

	marker := filepath.Join(t.TempDir(), "pwned")
	evil := nritest.GPUSpec(2, false)
	evil.ContainerEdits.Hooks = []*specs.Hook{{HookName: "createContainer", Path: "/tmp/evil", Args: []string{"evil", "touch", marker}}}
	nritest.WriteSpec(t, run, "planted", evil)
	kubelet.Allocate("ml", "train2", "main", "nvidia.com/gpu", "0")
	_, err = rt.Create(pod("ml", "train2", "runc"), ctr("main", nil))
	require.ErrorContains(t, err, "pod ml/train2 container main: a GPU CDI spec brings what the CDI policy does not allow")
	require.ErrorContains(t, err, filepath.Join(run, "planted.yaml")+": containerEdits.hooks[0]: hook /tmp/evil: not one of NVIDIA's toolkit hooks")
	_, statErr := os.Stat(marker)
	assert.ErrorIs(t, statErr, os.ErrNotExist)

	assert.ErrorContains(t, validHookPolicy("sometimes"), `hook policy "sometimes": want nvidia, none or any`)
}

// TestHookPolicies: NVIDIA's hooks at their installed paths pass the
// default; a look-alike elsewhere does not; HooksNone refuses every hook
// (only specs without, such as generate-cdi's, serve); HooksAny none.
func TestHookPolicies(t *testing.T) {
	ok := []*specs.Hook{
		{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"}},
		{HookName: "createContainer", Path: "/usr/local/nvidia/toolkit/nvidia-ctk", Args: []string{"nvidia-ctk", "hook", "create-symlinks", "--link", "libcuda.so.1::/usr/lib64/libcuda.so"}},
	}
	evil := &specs.Hook{HookName: "createContainer", Path: "/opt/evil/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}}
	for _, h := range ok {
		assert.NoError(t, (&Policy{}).checkHook(h), "the default is nvidia")
		assert.NoError(t, (&Policy{Hooks: HooksAny}).checkHook(h))
		assert.ErrorContains(t, (&Policy{Hooks: HooksNone}).checkHook(h), "no hooks allowed (--cdi-hooks=none)")
	}
	assert.ErrorContains(t, (&Policy{Hooks: HooksNVIDIA}).checkHook(evil), "hook /opt/evil/nvidia-cdi-hook: not one of NVIDIA's toolkit hooks at its installed path")
	assert.NoError(t, (&Policy{Hooks: HooksAny}).checkHook(evil))
}

// runPlugin runs p against the runtime side until the test ends.
func runPlugin(t *testing.T, p *Plugin, rt *nritest.Runtime) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Run(ctx, RunOptions{Socket: rt.Socket, Dial: rt.Dial, Name: "sandbox-gpu", Index: "10", MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	}()
	return func() {
		cancel()
		require.NoError(t, <-done)
	}
}
