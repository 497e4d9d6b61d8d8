package deviceplugin

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// TestMetrics: devices by health, allocations and registrations, as
// /metrics shows them.
func TestMetrics(t *testing.T) {
	h := start(t, nil, dev("12", 0), dev("13", 0))
	reg, err := h.kubelet.WaitRegistered(ctxT(t), res, 1)
	require.NoError(t, err)
	c := h.kubelet.Dial(t, reg.Endpoint)
	_, err = c.Allocate(ctxT(t), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"12"}}}})
	require.NoError(t, err)
	_, err = c.Allocate(ctxT(t), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"99"}}}})
	require.Error(t, err)
	h.host.set(t, dev("12", 0))
	eventually(t, "13 turns unhealthy", func() bool {
		return promtest.CollectAndCount(collector{h.m}, "sandbox_gpu_device_plugin_devices") == 2 &&
			strings.Contains(gathered(t, h.metrics), `sandbox_gpu_device_plugin_devices{health="unhealthy",resource="example.com/gpu"} 1`)
	})
	out := gathered(t, h.metrics)
	for _, want := range []string{
		`sandbox_gpu_device_plugin_devices{health="healthy",resource="example.com/gpu"} 1`,
		`sandbox_gpu_device_plugin_allocations_total{resource="example.com/gpu",result="ok"} 1`,
		`sandbox_gpu_device_plugin_allocations_total{resource="example.com/gpu",result="refused"} 1`,
		`sandbox_gpu_device_plugin_registrations_total{resource="example.com/gpu",result="ok"} 1`,
		`sandbox_gpu_device_plugin_server_starts_total{resource="example.com/gpu",result="ok"} 1`,
	} {
		assert.Contains(t, out, want)
	}
}

func gathered(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&b, mf)
		require.NoError(t, err)
	}
	return b.String()
}
