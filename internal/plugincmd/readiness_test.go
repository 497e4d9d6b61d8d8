package plugincmd

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/sandbox-gpu/sandbox-gpu/host"
	"github.com/sandbox-gpu/sandbox-gpu/host/hostsim"
	"github.com/sandbox-gpu/sandbox-gpu/internal/deviceplugin"
	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/kubelettest"
)

// TestReadyzFollowsTheManager: /readyz is the manager's state now, not a
// latch: ready once registered, not ready while the kubelet is gone (no
// registration with the kubelet now there), ready again once registered
// with the next kubelet.
func TestReadyzFollowsTheManager(t *testing.T) {
	k, _ := hostsim.NewHost(t, "a10")
	o := k.Options()
	dir := kubelettest.ShortDir(t)
	stub := kubelettest.Start(t, dir)
	const res = "example.com/gpu"
	scanner := deviceplugin.ScannerFunc(func(context.Context) ([]deviceplugin.Resource, error) {
		return []deviceplugin.Resource{{Name: res, Devices: []deviceplugin.Device{{ID: "12", NUMA: -1,
			Specs: []*pluginapi.DeviceSpec{{HostPath: "/dev/vfio/12", ContainerPath: "/dev/vfio/12", Permissions: "mrw"}}}}}}, nil
	})
	var c Common
	addr := make(chan string, 1)
	p := &shell.Program{Name: "test-plugin", Summary: "tests.", Commands: []*shell.Command{
		Command(&c, nil, func(ctx context.Context, env *shell.Env, h *host.Host) error {
			addr <- env.ListenAddr()
			return c.Serve(ctx, env, h, Plugin{Name: "test", Scanner: scanner})
		})}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var logs bytes.Buffer
	go func() {
		done <- shell.Run(ctx, p, []string{"--device-plugin-dir", dir, "--wait-vfio-ready=false", "--health-addr", "127.0.0.1:0",
			"--sysfs-root", o.SysfsRoot, "--dev-root", o.DevRoot, "--proc-root", o.ProcRoot, "--modules-dir", o.ModulesDir},
			shell.IO{Stdout: io.Discard, Stderr: &logs})
	}()
	defer func() {
		cancel()
		assert.Equal(t, 0, <-done)
	}()
	var base string
	select {
	case base = <-addr:
	case <-time.After(10 * time.Second):
		t.Fatal("no listener")
	}
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + base + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wait := func(what string, code int) string {
		t.Helper()
		var body string
		testutil.Eventually(t, 10*time.Second, what, func() bool {
			var got int
			got, body = readyz()
			return got == code
		})
		return body
	}
	_, err := stub.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	body := wait("ready once registered", http.StatusOK)
	assert.Contains(t, body, `"registered":true`)

	stub.Stop()
	body = wait("not ready without the kubelet", http.StatusServiceUnavailable)
	assert.Contains(t, body, "not registered with the kubelet")

	stub2 := kubelettest.Start(t, dir)
	_, err = stub2.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	wait("ready with the next kubelet", http.StatusOK)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
