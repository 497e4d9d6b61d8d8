package shell

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check reports whether one part is healthy, with details (a report that
// may name host devices or processes) for callers on this host only.
type Check func() (ok bool, detail any)

type namedCheck struct {
	name  string
	check Check
}

type health struct {
	mu          sync.Mutex
	ready, live []namedCheck
}

func (h *health) add(list *[]namedCheck, name string, c Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*list = append(*list, namedCheck{name, c})
}

// result runs the checks; no check means healthy.
func (h *health) result(list *[]namedCheck) (bool, map[string]any) {
	h.mu.Lock()
	checks := append([]namedCheck(nil), *list...)
	h.mu.Unlock()
	ok, details := true, map[string]any{}
	for _, c := range checks {
		good, detail := c.check()
		ok = ok && good
		details[c.name] = map[string]any{"ok": good, "detail": detail}
	}
	return ok, details
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves /healthz, /readyz and /metrics. Anyone gets the bare
// status ("ok" or "not ready"); the JSON details, which may name host
// devices and processes, go only to callers on this host (loopback or one
// of its own addresses: the kubelet's probes of a host-network pod).
func (e *Env) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ok, details := e.health.result(&e.health.live)
		answer(w, r, ok, "ok", "unhealthy", details)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ok, details := e.health.result(&e.health.ready)
		answer(w, r, ok, "ok", "not ready", details)
	})
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var g prometheus.Gatherer = e.Metrics
		if e.gatherer != nil {
			g = e.gatherer
		}
		promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	}))
	return mux
}

func answer(w http.ResponseWriter, r *http.Request, ok bool, good, bad string, details map[string]any) {
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	if !fromThisHost(r.RemoteAddr) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		if ok {
			fmt.Fprintln(w, good)
		} else {
			fmt.Fprintln(w, bad)
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": ok, "checks": details})
}

// fromThisHost reports whether remote (host:port) is loopback or one of
// this host's (this network namespace's) own addresses.
func fromThisHost(remote string) bool {
	h, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(h)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// serve starts the listener; stop closes it.
func serve(addr string, e *Env) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health address %s: %w", addr, err)
	}
	srv := &http.Server{Handler: e.Handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.Log.Error(err, "Health listener stopped", "address", addr)
		}
	}()
	e.listenAddr = ln.Addr().String()
	e.Log.V(1).Info("Serving /healthz, /readyz and /metrics", "address", e.listenAddr)
	return func() { _ = srv.Close(); <-done }, nil
}
