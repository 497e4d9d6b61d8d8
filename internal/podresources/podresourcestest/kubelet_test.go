package podresourcestest_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources"
	"github.com/sandbox-gpu/sandbox-gpu/internal/podresources/podresourcestest"
)

func start(t *testing.T) *podresourcestest.Kubelet {
	t.Helper()
	k := podresourcestest.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	require.NoError(t, k.Start())
	t.Cleanup(func() { assert.NoError(t, k.Stop()) })
	return k
}

// grpcClient is a plain PodResources client: the raw answers, in order.
func grpcClient(t *testing.T, socket string) podresourcesv1.PodResourcesListerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return podresourcesv1.NewPodResourcesListerClient(conn)
}

func callCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestListAndGetAnswerLikeTheKubelet(t *testing.T) {
	k := start(t)
	k.Allocate("vms", "vm-b", "compute", "nvidia.com/NVIDIA_L40S-24Q", "0000:41:00.5", "0000:41:00.4")
	k.Allocate("ml", "train", "side", "example.com/nic", "eth9")
	k.Allocate("ml", "train", "main", "nvidia.com/gpu", "2", "0")
	k.Allocate("ml", "train", "main", "example.com/nic", "eth0")
	k.Allocate("vms", "vm-a", "compute", "nvidia.com/NVIDIA_A10-4Q", "5e1a0000-0000-4000-8000-000000000001")
	k.Allocate("default", "plain", "main", "cpu") // known, no devices
	k.Allocate("vms", "gone", "compute", "nvidia.com/gpu", "1")
	k.Delete("vms", "gone")
	k.Allocate("ml", "retry", "main", "nvidia.com/gpu", "3")
	k.Allocate("ml", "retry", "main", "nvidia.com/gpu") // the container holds nothing of it any more
	raw := grpcClient(t, k.Socket())

	list, err := raw.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{})
	require.NoError(t, err)
	type ctr struct {
		name    string
		devices []string // resource=ids
	}
	var got [][]any
	for _, p := range list.GetPodResources() {
		var ctrs []ctr
		for _, c := range p.GetContainers() {
			var ds []string
			for _, d := range c.GetDevices() {
				ds = append(ds, d.GetResourceName()+"="+strings.Join(d.GetDeviceIds(), ","))
			}
			ctrs = append(ctrs, ctr{c.GetName(), ds})
		}
		got = append(got, []any{p.GetNamespace() + "/" + p.GetName(), ctrs})
	}
	assert.Equal(t, [][]any{
		{"default/plain", []ctr{{"main", nil}}},
		{"ml/retry", []ctr{{"main", nil}}},
		{"ml/train", []ctr{{"main", []string{"example.com/nic=eth0", "nvidia.com/gpu=2,0"}}, {"side", []string{"example.com/nic=eth9"}}}},
		{"vms/vm-a", []ctr{{"compute", []string{"nvidia.com/NVIDIA_A10-4Q=5e1a0000-0000-4000-8000-000000000001"}}}},
		{"vms/vm-b", []ctr{{"compute", []string{"nvidia.com/NVIDIA_L40S-24Q=0000:41:00.5,0000:41:00.4"}}}},
	}, got, "pods by namespace and name, containers and resources by name, device IDs as allocated")

	one, err := raw.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{PodNamespace: "vms", PodName: "vm-b"})
	require.NoError(t, err)
	assert.Equal(t, "vm-b", one.GetPodResources().GetName())
	_, err = raw.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{PodNamespace: "vms", PodName: "gone"})
	assert.Equal(t, codes.Unknown, status.Code(err), "a plain error, as the kubelet's")
	assert.Equal(t, "pod gone in namespace vms not found", status.Convert(err).Message())

	// The node daemons' client reads the same answers.
	c, err := podresources.New(k.Socket(), 2*time.Second)
	require.NoError(t, err)
	defer c.Close()
	all, err := c.List(callCtx(t))
	require.NoError(t, err)
	assert.Equal(t, podresources.PodAllocations{"main": {"nvidia.com/gpu": {"2", "0"}, "example.com/nic": {"eth0"}}, "side": {"example.com/nic": {"eth9"}}}, all["ml/train"])
	assert.Equal(t, podresources.PodAllocations{"main": {}}, all["default/plain"])
	none, err := c.Get(callCtx(t), "vms", "gone")
	require.NoError(t, err, "the client takes the kubelet's not-found for no allocation")
	assert.Empty(t, none)

	assert.Equal(t, podresourcestest.Calls{List: 2, Get: 3}, k.Calls())
}

func TestAllocatableResources(t *testing.T) {
	k := start(t)
	raw := grpcClient(t, k.Socket())
	resp, err := raw.GetAllocatableResources(callCtx(t), &podresourcesv1.AllocatableResourcesRequest{})
	require.NoError(t, err)
	assert.Empty(t, resp.GetDevices())

	k.SetAllocatable("nvidia.com/gpu", "0", "1", "2")
	k.SetAllocatable("example.com/nic", "eth0")
	k.SetAllocatable("example.com/old", "x")
	k.SetAllocatable("example.com/old")
	resp, err = raw.GetAllocatableResources(callCtx(t), &podresourcesv1.AllocatableResourcesRequest{})
	require.NoError(t, err)
	var got []string
	for _, d := range resp.GetDevices() {
		got = append(got, d.GetResourceName()+"="+strings.Join(d.GetDeviceIds(), ","))
	}
	assert.Equal(t, []string{"example.com/nic=eth0", "nvidia.com/gpu=0,1,2"}, got)
	assert.Equal(t, podresourcestest.Calls{GetAllocatableResources: 2}, k.Calls())
}

func TestDelayHoldsCallsUntilReleased(t *testing.T) {
	k := start(t)
	k.Allocate("ml", "slow", "main", "nvidia.com/gpu", "0")
	raw := grpcClient(t, k.Socket())
	_, err := raw.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{PodNamespace: "ml", PodName: "slow"})
	require.NoError(t, err, "connected before the delay")
	release := k.Delay()

	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = raw.Get(short, &podresourcesv1.GetPodResourcesRequest{PodNamespace: "ml", PodName: "slow"})
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "a delayed call does not answer: %v", err)

	answered := make(chan error, 1)
	long := callCtx(t)
	go func() {
		_, err := raw.List(long, &podresourcesv1.ListPodResourcesRequest{})
		answered <- err
	}()
	release()
	release() // a second release does nothing
	require.NoError(t, <-answered, "released, the call answers")
	_, err = raw.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{PodNamespace: "ml", PodName: "slow"})
	require.NoError(t, err, "after the release calls answer at once")
	assert.Equal(t, podresourcestest.Calls{List: 1, Get: 3}, k.Calls(), "calls count when they arrive, delayed or not")
}

func TestRestartOnTheSameSocket(t *testing.T) {
	k := start(t)
	k.Allocate("vms", "vm-a", "compute", "nvidia.com/gpu", "0")
	err := k.Start()
	require.Error(t, err, "a second Start while serving")
	assert.Contains(t, err.Error(), k.Socket())

	require.NoError(t, k.Stop())
	require.NoError(t, k.Stop(), "stopping a stopped kubelet does nothing")
	_, err = os.Stat(k.Socket())
	assert.ErrorIs(t, err, os.ErrNotExist, "the socket goes away with the kubelet")
	down, err := podresources.New(k.Socket(), 100*time.Millisecond)
	require.NoError(t, err)
	defer down.Close()
	_, err = down.List(callCtx(t))
	require.Error(t, err)
	assert.Contains(t, err.Error(), k.Socket(), "the client's error names the socket")

	require.NoError(t, k.Start())
	up, err := podresources.New(k.Socket(), 2*time.Second)
	require.NoError(t, err)
	defer up.Close()
	got, err := up.Get(callCtx(t), "vms", "vm-a")
	require.NoError(t, err)
	assert.Equal(t, podresources.PodAllocations{"compute": {"nvidia.com/gpu": {"0"}}}, got, "the restarted kubelet keeps its table")
}

func TestStartErrorNamesTheSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing", "kubelet.sock")
	k := podresourcestest.New(sock)
	err := k.Start()
	require.Error(t, err)
	assert.Contains(t, err.Error(), sock)
	var op *net.OpError
	assert.ErrorAs(t, err, &op, "the listen error is wrapped")
	assert.NoError(t, k.Stop(), "a kubelet that never served stops")
}
