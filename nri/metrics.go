package nri

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandbox-gpu/sandbox-gpu/internal/promreg"
)

type metrics struct {
	outcomes    *prometheus.CounterVec
	latency     prometheus.Histogram
	missing     prometheus.Gauge
	connections prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandbox_gpu_nri_create_container_total",
			Help: "CreateContainer requests by outcome (injected, none, none_unverified, privileged, skipped_sandboxed, failed, failed_open)"}, []string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sandbox_gpu_nri_create_container_seconds",
			Help: "Time the plugin spent on CreateContainer", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8)}),
		missing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_gpu_nri_containers_missing_devices",
			Help: "Containers found at the last Synchronize that hold an allocation but lack some of its device nodes"}),
		connections: prometheus.NewCounter(prometheus.CounterOpts{Name: "sandbox_gpu_nri_runtime_connections_total",
			Help: "Connections made to the runtime (reconnects after runtime restarts included)"}),
	}
	if err := promreg.Register(reg, "nri-gpu-plugin", m.outcomes, m.latency, m.missing, m.connections); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) observe(outcome string, d time.Duration) {
	m.outcomes.WithLabelValues(outcome).Inc()
	m.latency.Observe(d.Seconds())
}
