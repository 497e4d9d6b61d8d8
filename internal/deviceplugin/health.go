package deviceplugin

import (
	"context"
	"errors"
	"fmt"
)

// ServerHealth is one resource's server as readiness reports it.
type ServerHealth struct {
	Serving    bool   `json:"serving"`
	Registered bool   `json:"registered"` // with the kubelet now listening
	Error      string `json:"error,omitempty"`
}

// Health is the manager's current state: ready when the last scan
// succeeded and every server is serving and registered with the kubelet
// now there. It is computed on every call, never latched: a server whose
// listener failed, or a new kubelet not yet registered with, makes it not
// ready until the manager has recovered.
type Health struct {
	Ready     bool                    `json:"ready"`
	Scans     int                     `json:"scans"`
	ScanError string                  `json:"scanError,omitempty"`
	Servers   map[string]ServerHealth `json:"servers"`
}

// Health reports the current state (see Health).
func (m *Manager) Health() Health {
	m.mu.Lock()
	h := Health{Ready: m.scanErr == nil, Scans: m.scans, Servers: map[string]ServerHealth{}}
	if m.scanErr != nil {
		h.ScanError = m.scanErr.Error()
	}
	m.mu.Unlock()
	inst := m.kubeletInstance()
	for _, s := range m.sortedServers() {
		up, err := s.serving()
		s.mu.Lock()
		sh := ServerHealth{Serving: up, Registered: up && inst != "" && s.regKey == fmt.Sprintf("%s/%d", inst, s.gen)}
		s.mu.Unlock()
		if err != nil {
			sh.Error = err.Error()
		} else if !sh.Registered {
			sh.Error = "not registered with the kubelet"
		}
		h.Servers[s.name] = sh
		h.Ready = h.Ready && sh.Serving && sh.Registered
	}
	return h
}

// serve starts s (counting the result) and registers it with the kubelet.
// A start that fails is logged as what and left to the restart backoff
// (restartSoon), a registration the kubelet does not take yet to the retry
// backoff (retrySoon). It reports whether s started.
func (m *Manager) serve(ctx context.Context, s *server, what string) bool {
	err := s.start()
	m.metrics.starts.WithLabelValues(s.name, result(err == nil, "ok", "failed")).Inc()
	if err != nil {
		m.opts.Log.Error(err, what+"; retrying with backoff", "resource", s.name)
		m.restartSoon()
		return false
	}
	if !m.register(ctx, s) {
		m.retrySoon()
	}
	return true
}

// restartSoon asks Run to restart the servers that are down, with backoff.
func (m *Manager) restartSoon() { wake(m.restart) }

// wake sends a wake-up on ch (buffered, one deep) unless one is pending.
func wake(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// restartDown starts every server that is down again and registers it; it
// reports whether all are up.
func (m *Manager) restartDown(ctx context.Context) bool {
	ok := true
	for _, s := range m.sortedServers() {
		up, why := s.serving()
		if up {
			continue
		}
		s.stop()
		if !m.serve(ctx, s, "Serving resource again") {
			ok = false
			continue
		}
		if why == nil {
			why = errors.New("not started")
		}
		m.opts.Log.Info("Serving resource again", "resource", s.name, "after", why.Error())
	}
	return ok
}
