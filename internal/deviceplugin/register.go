package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// reRegister restarts servers whose socket is gone (the kubelet wipes the
// folder when it starts) and registers every server again.
func (m *Manager) reRegister(ctx context.Context) {
	for _, s := range m.sortedServers() {
		if _, err := os.Stat(s.socket); err != nil {
			s.stop()
			m.serve(ctx, s, "Serving resource again")
			continue
		}
		if !m.register(ctx, s) {
			m.retrySoon()
		}
	}
}

// retrySoon asks Run to retry registrations with a short backoff (the
// kubelet creates kubelet.sock a moment before it accepts connections).
func (m *Manager) retrySoon() { wake(m.retry) }

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
