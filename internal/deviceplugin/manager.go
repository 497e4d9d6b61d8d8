package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandbox-gpu/sandbox-gpu/internal/promreg"
)

// KubeletSocketName is the kubelet's registration socket in the plugin dir.
const KubeletSocketName = "kubelet.sock"

// Options configure a Manager.
type Options struct {
	// Dir is the kubelet's device-plugin folder (holds kubelet.sock).
	Dir string
	// SocketPrefix names this plugin's sockets: <prefix>-<resource>.sock.
	SocketPrefix string
	Scanner      Scanner
	// WatchPaths are folders whose changes trigger a rescan (/dev/vfio,
	// driver folders, the VFIO manager's ready dir). A path that does not
	// exist yet is watched through its nearest existing parent.
	WatchPaths []string
	// Rescan is the period of the safety-net rescan (default 30s).
	Rescan time.Duration
	// Debounce coalesces bursts of events (default 20ms).
	Debounce time.Duration
	// Ready gates advertising: no resource that WaitsForVFIO is registered
	// before it first reports true (the VFIO manager's readiness). Nil
	// means ready.
	Ready func() bool
	// OnScan sees every successful scan (CDI spec and KubeVirt
	// permittedHostDevices writers).
	OnScan func([]Resource) error
	Log    logr.Logger
	// Registerer receives the plugin's metrics (devices by health,
	// allocations, registrations, server starts); nil keeps them
	// unregistered.
	Registerer prometheus.Registerer
	// RestartBackoff is the first wait before a server that failed to
	// start, or whose listener failed, is started again (default 100ms);
	// it doubles after each failure up to MaxRestartBackoff (default 10s),
	// and the manager keeps trying at that pace.
	RestartBackoff, MaxRestartBackoff time.Duration
}

// Manager runs one server per resource and keeps them registered.
type Manager struct {
	opts     Options
	mu       sync.Mutex
	servers  map[string]*server
	ready    bool
	scans    int
	attempts int
	retry    chan struct{} // asks Run to retry registrations soon
	restart  chan struct{} // asks Run to restart servers that are down
	scanErr  error         // the last scan's error, nil when it succeeded
	metrics  *metrics
}

// NewManager validates the options.
func NewManager(opts Options) (*Manager, error) {
	if opts.Dir == "" || opts.Scanner == nil || opts.SocketPrefix == "" {
		return nil, errors.New("deviceplugin: Dir, SocketPrefix and Scanner are required")
	}
	if opts.Rescan <= 0 {
		opts.Rescan = 30 * time.Second
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 20 * time.Millisecond
	}
	if opts.RestartBackoff <= 0 {
		opts.RestartBackoff = 100 * time.Millisecond
	}
	if opts.MaxRestartBackoff < opts.RestartBackoff {
		opts.MaxRestartBackoff = max(10*time.Second, opts.RestartBackoff)
	}
	m := &Manager{opts: opts, servers: map[string]*server{}, retry: make(chan struct{}, 1), restart: make(chan struct{}, 1), metrics: newMetrics()}
	if err := promreg.Register(opts.Registerer, "deviceplugin", collector{m}); err != nil {
		return nil, err
	}
	return m, nil
}

// SocketPath is where the server of a resource listens.
func (m *Manager) SocketPath(resource string) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(resource)
	return filepath.Join(m.opts.Dir, m.opts.SocketPrefix+"-"+name+".sock")
}

// Run scans, serves and registers until ctx ends, then stops every server
// and removes its socket.
func (m *Manager) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("deviceplugin: watcher: %w", err)
	}
	defer w.Close()
	if err := w.Add(m.opts.Dir); err != nil {
		return fmt.Errorf("deviceplugin: watch %s: %w", m.opts.Dir, err)
	}
	watched := map[string]bool{}
	m.addWatches(w, watched)
	defer m.stopAll()

	tick := time.NewTicker(m.opts.Rescan)
	defer tick.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	pending := false
	// Registration retries: 50 ms doubling to 1 s, for about 10 s; then the
	// rescan tick keeps trying.
	retryTimer := time.NewTimer(time.Hour)
	retryTimer.Stop()
	backoff, retryUntil := time.Duration(0), time.Time{}
	// Server restarts: RestartBackoff doubling to MaxRestartBackoff, until
	// every server is up again.
	restartTimer := time.NewTimer(time.Hour)
	restartTimer.Stop()
	restartBackoff := time.Duration(0)
	m.scan(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-w.Errors:
			m.opts.Log.Error(err, "Watching for device changes; rescanning")
			m.scan(ctx)
		case ev := <-w.Events:
			switch {
			case ev.Name == filepath.Join(m.opts.Dir, KubeletSocketName) && ev.Has(fsnotify.Create):
				m.opts.Log.Info("Kubelet socket created; registering again")
				m.reRegister(ctx)
			case filepath.Dir(ev.Name) == filepath.Clean(m.opts.Dir) && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
				if m.ownsSocket(ev.Name) {
					m.opts.Log.Info("Plugin socket removed; serving and registering again", "socket", ev.Name)
					m.reRegister(ctx)
				}
			default:
				if ev.Has(fsnotify.Create) {
					m.addWatches(w, watched)
				}
				if !pending {
					pending = true
					debounce.Reset(m.opts.Debounce)
				}
			}
		case <-debounce.C:
			pending = false
			m.scan(ctx)
		case <-m.retry:
			if backoff == 0 {
				backoff, retryUntil = 50*time.Millisecond, time.Now().Add(10*time.Second)
				retryTimer.Reset(backoff)
			}
		case <-retryTimer.C:
			if m.registerPending(ctx) || time.Now().After(retryUntil) {
				backoff = 0
				continue
			}
			backoff = min(2*backoff, time.Second)
			retryTimer.Reset(backoff)
		case <-m.restart:
			if restartBackoff == 0 {
				restartBackoff = m.opts.RestartBackoff
				restartTimer.Reset(restartBackoff)
			}
		case <-restartTimer.C:
			if m.restartDown(ctx) {
				restartBackoff = 0
				continue
			}
			restartBackoff = min(2*restartBackoff, m.opts.MaxRestartBackoff)
			restartTimer.Reset(restartBackoff)
		case <-tick.C:
			m.scan(ctx)
			m.registerPending(ctx)
		}
	}
}

// addWatches watches each path, or its nearest existing parent until the
// path appears.
func (m *Manager) addWatches(w *fsnotify.Watcher, watched map[string]bool) {
	for _, p := range m.opts.WatchPaths {
		for dir := filepath.Clean(p); ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(dir); err == nil {
				if !watched[dir] && w.Add(dir) == nil {
					watched[dir] = true
				}
				break
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
}

func (m *Manager) ownsSocket(path string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.servers {
		if s.socket == path {
			return true
		}
	}
	return false
}

// scan asks the scanner and updates (and, the first time, starts and
// registers) every server.
func (m *Manager) scan(ctx context.Context) {
	m.mu.Lock()
	m.attempts++
	if !m.ready {
		m.ready = m.opts.Ready == nil || m.opts.Ready()
	}
	ready := m.ready
	m.mu.Unlock()
	res, err := m.opts.Scanner.Scan(ctx)
	m.mu.Lock()
	m.scanErr = err
	m.mu.Unlock()
	if err != nil {
		m.opts.Log.Error(err, "Scanning devices")
		return
	}
	if !ready {
		var free []Resource
		for _, r := range res {
			if !r.WaitsForVFIO {
				free = append(free, r)
			}
		}
		if len(free) < len(res) {
			m.opts.Log.V(1).Info("Waiting for the VFIO manager's readiness before advertising passthrough devices")
		}
		if len(free) == 0 {
			return
		}
		res = free
	}
	// Publish first (CDI specs, permittedHostDevices): a device must be
	// resolvable before the kubelet can hand it out.
	if m.opts.OnScan != nil {
		if err := m.opts.OnScan(res); err != nil {
			m.opts.Log.Error(err, "Publishing scan result")
		}
	}
	seen := map[string]bool{}
	for _, r := range res {
		seen[r.Name] = true
		s, fresh := m.server(r.Name)
		if fresh {
			s.update(r)
			m.serve(ctx, s, "Serving resource")
			continue
		}
		if s.update(r) {
			m.opts.Log.V(1).Info("Devices changed", "resource", r.Name, "devices", len(r.Devices))
		}
	}
	m.mu.Lock()
	var gone []*server
	for name, s := range m.servers {
		if !seen[name] {
			gone = append(gone, s)
		}
	}
	m.scans++
	m.mu.Unlock()
	for _, s := range gone {
		s.update(Resource{Name: s.name})
	}
}

func (m *Manager) server(name string) (*server, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.servers[name]; ok {
		return s, false
	}
	s := newServer(name, m.SocketPath(name), m.metrics.allocations, m.restartSoon)
	m.servers[name] = s
	return s, true
}

func (m *Manager) sortedServers() []*server {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (m *Manager) stopAll() {
	for _, s := range m.sortedServers() {
		s.stop()
		_ = os.Remove(s.socket)
	}
}

// Attempts returns how many scans were attempted, ready or not.
func (m *Manager) Attempts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.attempts
}

// Scans returns how many scans completed (for tests and health).
func (m *Manager) Scans() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.scans
}

// Resources lists the resources being served.
func (m *Manager) Resources() []string {
	var out []string
	for _, s := range m.sortedServers() {
		out = append(out, s.name)
	}
	return out
}

// Streams returns the number of open ListAndWatch streams of a resource.
func (m *Manager) Streams(resource string) int {
	m.mu.Lock()
	s, ok := m.servers[resource]
	m.mu.Unlock()
	if !ok {
		return 0
	}
	return int(s.streams.Load())
}
