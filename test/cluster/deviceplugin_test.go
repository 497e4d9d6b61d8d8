package cluster

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const (
	testResource = "sandbox-gpu.test/device"
	testEnv      = "SANDBOX_GPU_TEST_DEVICES"
	// testDevice is the device node the plugin hands to containers: the host's /dev/zero (1:5).
	testDevice = "/dev/sandbox-gpu-test"
)

// TestDevicePlugin: a device plugin registered on the kubelet's fixed socket
// (/var/lib/kubelet/device-plugins/kubelet.sock, the work folder's inside the node's mount
// namespace) makes the real kubelet report its resource in the Node's allocatable, and a pod asking
// for it runs with the environment and the device node the plugin's Allocate returned.
func TestDevicePlugin(t *testing.T) {
	c := requireCluster(t)
	ctx := testContext(t, testWithin)
	plugin := startTestPlugin(t, c.DevicePluginDir(), "dev0", "dev1")
	start := time.Now()
	require.NoError(t, pollTrue(ctx, podWithin, func() (bool, error) {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		q := node.Status.Allocatable[testResource]
		return q.Value() == 2, nil
	}), "Node allocatable %s: 2", testResource)
	t.Logf("%s in the Node's allocatable %v after registration", testResource, time.Since(start).Round(time.Millisecond))

	ns := "smoke-device"
	require.NoError(t, c.CreateNamespace(ctx, ns, namespaceWithin))
	pod := busyboxPod("device-user", "exec sleep 2147483647")
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{testResource: resource.MustParse("1")}
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.WaitForPod(ctx, ns, pod.Name, podWithin, cluster.PodRunning)
	require.NoError(t, err)

	env, _, err := c.Exec(ctx, ns, pod.Name, "main", "/bin/sh", "-c", "echo $"+testEnv)
	require.NoError(t, err)
	got := strings.TrimSpace(env)
	assert.Contains(t, []string{"dev0", "dev1"}, got, "%s from Allocate", testEnv)
	assert.Equal(t, []string{got}, plugin.allocated(), "one device allocated, the one in the env")
	// busybox stat: %t and %T are the major and minor numbers in hex (/dev/zero is 1:5).
	dev, _, err := c.Exec(ctx, ns, pod.Name, "main", "/bin/stat", "-c", "%F %t:%T", testDevice)
	require.NoError(t, err)
	assert.Equal(t, "character special file 1:5", strings.TrimSpace(dev), "the device node from Allocate")

	deletePodAndWait(t, c, ns, pod.Name)
}

// startTestPlugin serves a plugin of testResource with the devices on a socket in dir and
// registers it with the kubelet there once the kubelet's socket exists; it stops at the end of the
// test. Its Allocate returns the IDs in testEnv and /dev/zero as testDevice.
func startTestPlugin(t *testing.T, dir string, devices ...string) *fakePlugin {
	t.Helper()
	return servePlugin(t, dir, testResource, "sandbox-gpu-test.sock", devices, func(ids []string) *pluginapi.ContainerAllocateResponse {
		return &pluginapi.ContainerAllocateResponse{
			Envs:    map[string]string{testEnv: strings.Join(ids, ",")},
			Devices: []*pluginapi.DeviceSpec{{ContainerPath: testDevice, HostPath: "/dev/zero", Permissions: "rw"}},
		}
	})
}

// fakePlugin is a v1beta1 device plugin with fixed healthy devices; Allocate records the IDs the
// kubelet allocated and answers each container with respond(its IDs).
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []string
	respond func(ids []string) *pluginapi.ContainerAllocateResponse
	allocs  chan []string
}

// servePlugin serves a fakePlugin of resource with the devices on the socket endpoint in the
// kubelet's device-plugin folder dir and registers it with the kubelet there once the kubelet's
// socket exists; it stops at the end of the test.
func servePlugin(t *testing.T, dir, resource, endpoint string, devices []string,
	respond func(ids []string) *pluginapi.ContainerAllocateResponse) *fakePlugin {
	t.Helper()
	p := &fakePlugin{devices: devices, respond: respond, allocs: make(chan []string, 16)}
	ctx := testContext(t, podWithin)
	kubeletSock := filepath.Join(dir, filepath.Base(pluginapi.KubeletSocket))
	require.NoError(t, pollTrue(ctx, podWithin, func() (bool, error) {
		_, err := os.Stat(kubeletSock)
		return err == nil, nil
	}), "the kubelet's %s", kubeletSock)

	sock := filepath.Join(dir, endpoint)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(sock) }) // after the server stops
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	e2e.Serve(t, "device plugin server "+resource, srv, l)

	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource,
	})
	require.NoError(t, err, "register %s with the kubelet", resource)
	return p
}

func (p *fakePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once and keeps the stream open until the kubelet or the server
// ends it.
func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, id := range p.devices {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := s.Send(resp); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *fakePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		ids := cr.GetDevicesIds()
		p.allocs <- ids
		resp.ContainerResponses = append(resp.ContainerResponses, p.respond(ids))
	}
	return resp, nil
}

// nextAllocation returns the IDs of the next container's allocation recorded, without waiting;
// false when there is none.
func (p *fakePlugin) nextAllocation() ([]string, bool) {
	select {
	case ids := <-p.allocs:
		return ids, true
	default:
		return nil, false
	}
}

// allocated returns the device IDs of the Allocate calls so far, in order.
func (p *fakePlugin) allocated() []string {
	var out []string
	for {
		ids, ok := p.nextAllocation()
		if !ok {
			return out
		}
		out = append(out, ids...)
	}
}
