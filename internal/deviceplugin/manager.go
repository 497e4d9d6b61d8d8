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
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
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
	// allocations, registrations); nil keeps them unregistered.
	Registerer prometheus.Registerer
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
	m := &Manager{opts: opts, servers: map[string]*server{}, retry: make(chan struct{}, 1), metrics: newMetrics()}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(collector{m}); err != nil {
			return nil, fmt.Errorf("deviceplugin: register metrics: %w", err)
		}
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
			if err := s.start(); err != nil {
				m.opts.Log.Error(err, "Serving resource", "resource", r.Name)
				continue
			}
			if !m.register(ctx, s) {
				m.retrySoon()
			}
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
	s := newServer(name, m.SocketPath(name), m.metrics.allocations)
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

// reRegister restarts servers whose socket is gone (the kubelet wipes the
// folder when it starts) and registers every server again.
func (m *Manager) reRegister(ctx context.Context) {
	for _, s := range m.sortedServers() {
		_, err := os.Stat(s.socket)
		missing := err != nil
		if missing {
			s.stop()
			if err := s.start(); err != nil {
				m.opts.Log.Error(err, "Serving resource again", "resource", s.name)
				continue
			}
		}
		if !m.register(ctx, s) {
			m.retrySoon()
		}
	}
}

// retrySoon asks Run to retry registrations with a short backoff (the
// kubelet creates kubelet.sock a moment before it accepts connections).
func (m *Manager) retrySoon() {
	select {
	case m.retry <- struct{}{}:
	default:
	}
}

// registerPending retries registrations that failed or are due.
func (m *Manager) registerPending(ctx context.Context) bool {
	ok := true
	for _, s := range m.sortedServers() {
		ok = m.register(ctx, s) && ok
	}
	return ok
}

// kubeletInstance identifies the kubelet.sock file now there (inode and
// change time: a restarted kubelet's socket differs even when the inode
// number is reused), "" when there is none.
func (m *Manager) kubeletInstance() string {
	st, err := os.Stat(filepath.Join(m.opts.Dir, KubeletSocketName))
	if err != nil {
		return ""
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d@%d.%d", sys.Ino, sys.Ctim.Sec, sys.Ctim.Nsec)
	}
	return st.ModTime().String()
}

// register tells the kubelet about one server, at most once per kubelet
// instance and listener: a kubelet restart (which removes the plugin's
// socket, then creates kubelet.sock) yields exactly one registration. It
// reports whether the server is registered with the current kubelet.
func (m *Manager) register(ctx context.Context, s *server) bool {
	inst := m.kubeletInstance()
	s.mu.Lock()
	key := fmt.Sprintf("%s/%d", inst, s.gen)
	done := s.regKey == key && inst != ""
	s.mu.Unlock()
	if done {
		return true
	}
	err := Register(ctx, filepath.Join(m.opts.Dir, KubeletSocketName), s.name, filepath.Base(s.socket))
	m.metrics.registrations.WithLabelValues(s.name, result(err == nil, "ok", "failed")).Inc()
	if err != nil {
		m.opts.Log.Info("Kubelet registration pending", "resource", s.name, "reason", err.Error())
		return false
	}
	s.mu.Lock()
	s.regKey = key
	s.mu.Unlock()
	m.opts.Log.Info("Registered with the kubelet", "resource", s.name, "socket", s.socket)
	return true
}

// Register calls the kubelet's Registration service.
func Register(ctx context.Context, kubeletSocket, resource, endpoint string) error {
	if _, err := os.Stat(kubeletSocket); err != nil {
		return fmt.Errorf("kubelet socket %s: %w", kubeletSocket, err)
	}
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet %s: %w", kubeletSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource,
		Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("register %s with kubelet %s: %w", resource, kubeletSocket, err)
	}
	return nil
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
