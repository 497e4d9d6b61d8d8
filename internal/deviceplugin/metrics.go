package deviceplugin

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a plugin's counters; the device gauge is computed from the
// servers at collection time, so it is exact without bookkeeping.
type metrics struct {
	allocations   *prometheus.CounterVec
	registrations *prometheus.CounterVec
	starts        *prometheus.CounterVec
	devices       *prometheus.Desc
}

func newMetrics() *metrics {
	return &metrics{
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_gpu_device_plugin_allocations_total",
			Help: "Allocate calls per container by resource and result (ok, refused)."}, []string{"resource", "result"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_gpu_device_plugin_registrations_total",
			Help: "Registrations with the kubelet by resource and result (ok, failed)."}, []string{"resource", "result"}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_gpu_device_plugin_server_starts_total",
			Help: "Starts of a resource's gRPC server (first, and after a failure) by resource and result (ok, failed)."}, []string{"resource", "result"}),
		devices: prometheus.NewDesc("sandbox_gpu_device_plugin_devices",
			"Advertised devices by resource and health (healthy, unhealthy).", []string{"resource", "health"}, nil),
	}
}

// collector exposes the manager's metrics.
type collector struct{ m *Manager }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	c.m.metrics.allocations.Describe(ch)
	c.m.metrics.registrations.Describe(ch)
	c.m.metrics.starts.Describe(ch)
	ch <- c.m.metrics.devices
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.m.metrics.allocations.Collect(ch)
	c.m.metrics.registrations.Collect(ch)
	c.m.metrics.starts.Collect(ch)
	for _, s := range c.m.sortedServers() {
		healthy, unhealthy := s.counts()
		ch <- prometheus.MustNewConstMetric(c.m.metrics.devices, prometheus.GaugeValue, float64(healthy), s.name, "healthy")
		ch <- prometheus.MustNewConstMetric(c.m.metrics.devices, prometheus.GaugeValue, float64(unhealthy), s.name, "unhealthy")
	}
}

func result(ok bool, good, bad string) string {
	if ok {
		return good
	}
	return bad
}
