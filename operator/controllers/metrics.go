package controllers

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sandbox-gpu/sandbox-gpu/internal/promreg"
)

// Names of the operator's own metrics (controller-runtime's come on the same
// /metrics).
const (
	MetricGPUNodes           = "sandbox_gpu_operator_gpu_nodes"
	MetricTransitionSeconds  = "sandbox_gpu_operator_config_transition_duration_seconds"
	MetricReconcileErrors    = "sandbox_gpu_operator_reconcile_errors_total"
	MetricReleases           = "sandbox_gpu_operator_releases_total"
	noConfig                 = "none" // the from label of a new node's first config
	transitionBucketsMinimum = 1.0    // seconds: status times have a second's resolution
)

// Metrics are the operator's own metrics. The manager assembly makes one
// and registers it once; a nil *Metrics records nothing.
type Metrics struct {
	nodes       *prometheus.GaugeVec
	transitions *prometheus.HistogramVec
	errors      *prometheus.CounterVec
	releases    *prometheus.CounterVec

	mu     sync.Mutex
	byNode map[string]nodeKey // what each node counts under in nodes
	counts map[nodeKey]int    // nodes per series of nodes
}

// nodeKey is a node's labels in the GPU node gauge.
type nodeKey struct{ config, state string }

// NewMetrics makes the operator's metrics and registers them with reg
// (controller-runtime's metrics.Registry serves them on the manager's
// /metrics; tests pass their own registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricGPUNodes,
			Help: "GPU nodes by desired workload config and state (pending, draining, configuring, ready, failed)."},
			[]string{"config", "state"}),
		transitions: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricTransitionSeconds,
			Help: "Seconds from a workload config change (or a new node) until the node is ready with the new config, by old and new config (from=\"none\" for a new node).",
			// 1 s to ~2.3 h: a drain may wait for GPU jobs to finish.
			Buckets: prometheus.ExponentialBuckets(transitionBucketsMinimum, 2.5, 11)},
			[]string{"from", "to"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReconcileErrors,
			Help: "Reconciles that ended in an error, by controller."},
			[]string{"controller"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReleases,
			Help: "Releases of a config's host state by operand (vfio-manager, vgpu-device-manager) and result: done, refused (a GPU or vGPU in use, once per reason), timed_out."},
			[]string{"operand", "result"}),
		byNode: map[string]nodeKey{},
		counts: map[nodeKey]int{},
	}
	if err := promreg.Register(reg, "operator", m.nodes, m.transitions, m.errors, m.releases); err != nil {
		return nil, err
	}
	return m, nil
}

// setNode counts the node under its desired config and state (and no
// longer under what it counted as before).
func (m *Metrics) setNode(name, config, state string) {
	if m == nil {
		return
	}
	if state == "" {
		state = "pending"
	}
	k := nodeKey{config, state}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.byNode[name]
	if ok && old == k {
		return
	}
	if ok {
		m.uncount(old)
	}
	m.byNode[name] = k
	m.counts[k]++
	m.nodes.WithLabelValues(k.config, k.state).Set(float64(m.counts[k]))
}

// forgetNode stops counting a node that is gone (or no longer a GPU node).
func (m *Metrics) forgetNode(name string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.byNode[name]; ok {
		m.uncount(old)
		delete(m.byNode, name)
	}
}

// uncount takes one node off k's series, dropping the series at zero so
// that a config or state no node has leaves no stale line. m.mu is held.
func (m *Metrics) uncount(k nodeKey) {
	m.counts[k]--
	if m.counts[k] <= 0 {
		delete(m.counts, k)
		m.nodes.DeleteLabelValues(k.config, k.state)
		return
	}
	m.nodes.WithLabelValues(k.config, k.state).Set(float64(m.counts[k]))
}

// transitionDone observes a completed config change.
func (m *Metrics) transitionDone(from, to string, d time.Duration) {
	if m == nil {
		return
	}
	if from == "" {
		from = noConfig
	}
	m.transitions.WithLabelValues(from, to).Observe(d.Seconds())
}

// Results of a release (the result label of MetricReleases).
const (
	releaseDone     = "done"
	releaseRefused  = "refused"
	releaseTimedOut = "timed_out"
)

// released counts a step of a release of operand's host state.
func (m *Metrics) released(operand, result string) {
	if m == nil {
		return
	}
	m.releases.WithLabelValues(operand, result).Inc()
}

// countErrors wraps a controller's reconciler so that its errors are
// counted under the controller's name.
func (m *Metrics) countErrors(controller string, r reconcile.Reconciler) reconcile.Reconciler {
	if m == nil {
		return r
	}
	errs := m.errors.WithLabelValues(controller)
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
		res, err := r.Reconcile(ctx, req)
		if err != nil && !errors.Is(err, context.Canceled) {
			errs.Inc()
		}
		return res, err
	})
}
