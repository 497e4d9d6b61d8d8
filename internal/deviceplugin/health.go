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

// startServer starts s, counting the result.
func (m *Manager) startServer(s *server) error {
	err := s.start()
	m.metrics.starts.WithLabelValues(s.name, result(err == nil, "ok", "failed")).Inc()
	return err
}

// restartSoon asks Run to restart the servers that are down, with backoff.
func (m *Manager) restartSoon() {
	select {
	case m.restart <- struct{}{}:
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
		if err := m.startServer(s); err != nil {
			m.opts.Log.Error(err, "Serving resource again; retrying with backoff", "resource", s.name)
			ok = false
			continue
		}
		if why == nil {
			why = errors.New("not started")
		}
		m.opts.Log.Info("Serving resource again", "resource", s.name, "after", why.Error())
		if !m.register(ctx, s) {
			m.retrySoon()
		}
	}
	return ok
}
