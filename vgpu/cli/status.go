package cli

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandbox-gpu/sandbox-gpu/internal/shell"
	"github.com/sandbox-gpu/sandbox-gpu/internal/wire"
	"github.com/sandbox-gpu/sandbox-gpu/vgpu"
)

// status is the run daemon's readiness and metrics, fed by every pass of
// the loop.
type status struct {
	mu      sync.Mutex
	last    *wire.VGPUReady
	state   *prometheus.GaugeVec
	vgpus   *prometheus.GaugeVec
	refused prometheus.Gauge
}

func newStatus(env *shell.Env) *status {
	s := &status{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sandbox_gpu_vgpu_config_state",
			Help: "1 for the state of the last pass (success, failed), by selected config."}, []string{"config", "state"}),
		vgpus: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sandbox_gpu_vgpu_devices",
			Help: "vGPUs on the node by GPU address and type after the last pass."}, []string{"gpu", "type"}),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandbox_gpu_vgpu_refused_gpus",
			Help: "GPUs whose change the last pass refused (a vGPU in use) or failed."}),
	}
	env.Metrics.MustRegister(s.state, s.vgpus, s.refused)
	env.AddReady("vgpu-device-manager", s.ready)
	return s
}

func (s *status) observe(r wire.VGPUReady) {
	s.mu.Lock()
	s.last = &r
	s.mu.Unlock()
	s.state.Reset()
	s.state.WithLabelValues(r.Config, r.State).Set(1)
	s.vgpus.Reset()
	for _, g := range r.GPUs {
		for t, n := range g.VGPUs {
			s.vgpus.WithLabelValues(g.Address, t).Set(float64(n))
		}
	}
	s.refused.Set(float64(len(r.Refused)))
}

// ready: the node holds its config's vGPUs (refusals and config errors
// are not ready, with the reason in the details).
func (s *status) ready() (bool, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		return false, map[string]string{"state": "not applied yet"}
	}
	return s.last.State == vgpu.StateSuccess, s.last
}
