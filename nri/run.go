package nri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/go-logr/logr"
)

// RunOptions say how the plugin reaches the runtime.
type RunOptions struct {
	// Socket is the runtime's NRI socket (external plugin).
	Socket string
	// Name and Index identify the plugin ("sandbox-gpu", two digits).
	Name, Index string
	// Preregistered: the runtime started the plugin and handed it a
	// connection; when that goes, the plugin ends (the runtime restarts it).
	Preregistered bool
	// MinBackoff and MaxBackoff bound the wait between reconnects
	// (100ms, 5s).
	MinBackoff, MaxBackoff time.Duration
	// Connected, when set, is told when a connection is up or down.
	Connected func(bool)
	// Dial, when set, replaces the plain unix-socket dial.
	Dial func(socket string) (net.Conn, error)
	// StartTimeout bounds registration with the runtime (default 30s,
	// beyond NRI's registration and request timeouts).
	StartTimeout time.Duration
}

var errStartHung = errors.New("registration with the runtime did not finish")

// startBounded starts the stub, giving up after timeout.
func startBounded(ctx context.Context, s stub.Stub, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w within %s", errStartHung, timeout)
	case <-ctx.Done():
		select {
		case err := <-done:
			return err
		case <-time.After(time.Second):
			return fmt.Errorf("%w: stopping", errStartHung)
		}
	}
}

// Run connects to the runtime and serves it, reconnecting with backoff when
// the runtime restarts, until ctx ends (then it returns nil).
func (p *Plugin) Run(ctx context.Context, ro RunOptions) error {
	if ro.MinBackoff <= 0 {
		ro.MinBackoff = 100 * time.Millisecond
	}
	if ro.MaxBackoff < ro.MinBackoff {
		ro.MaxBackoff = 5 * time.Second
	}
	if ro.Connected == nil {
		ro.Connected = func(bool) {}
	}
	opts := []stub.Option{stub.WithLogger(nriLogger{p.core().o.Log.WithName("nri")})}
	if !ro.Preregistered {
		// A pre-registered plugin's name and index come from the runtime
		// (NRI_PLUGIN_NAME, NRI_PLUGIN_IDX); setting them again is an error.
		opts = append(opts, stub.WithPluginName(ro.Name), stub.WithPluginIdx(ro.Index))
		if ro.Socket != "" {
			opts = append(opts, stub.WithSocketPath(ro.Socket))
		}
	}
	if ro.Dial != nil {
		opts = append(opts, stub.WithDialer(ro.Dial))
	}
	if !p.core().o.FailOpen {
		// On runtimes with NRI failure policies (NRI v0.12.5 and later; not
		// containerd 2.4, which has v0.12.3) a timeout or lost connection
		// fails the request too, and a slow answer keeps the connection.
		// Elsewhere the runtime drops a plugin that times out and creates
		// the container without it, which is why kubelet calls are bounded
		// well inside the runtime's per-call budget.
		opts = append(opts, stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true}))
	}
	backoff := ro.MinBackoff
	for {
		closed := make(chan struct{})
		var once sync.Once
		s, err := stub.New(p, append(opts, stub.WithOnClose(func() { once.Do(func() { close(closed) }) }))...)
		if err != nil {
			return fmt.Errorf("NRI plugin %s-%s: %w", ro.Index, ro.Name, err)
		}
		started := time.Now()
		err = startBounded(ctx, s, ro.StartTimeout)
		if errors.Is(err, errStartHung) {
			if ctx.Err() != nil {
				return nil
			}
			// The stub holds its lock while waiting for Configure; a runtime
			// that went away at that moment leaves it stuck for good. Exit,
			// so that the process is restarted.
			return fmt.Errorf("NRI plugin %s-%s: %w", ro.Index, ro.Name, err)
		}
		if err == nil {
			ro.Connected(true)
			p.core().o.Log.Info("Registered with the runtime", "socket", ro.Socket)
			select {
			case <-ctx.Done():
				s.Stop()
				ro.Connected(false)
				return nil
			case <-closed:
			}
			s.Stop()
			ro.Connected(false)
			err = errors.New("connection closed")
		}
		if ctx.Err() != nil {
			return nil
		}
		if ro.Preregistered {
			return fmt.Errorf("NRI plugin %s-%s: the runtime's connection ended: %w", ro.Index, ro.Name, err)
		}
		if time.Since(started) > 30*time.Second {
			backoff = ro.MinBackoff // it was up a while: a fresh outage
		}
		p.core().o.Log.Info("Runtime unreachable, reconnecting", "socket", ro.Socket, "reason", err.Error(), "in", backoff.String())
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, ro.MaxBackoff)
	}
}

// nriLogger sends NRI's own logging to logr.
type nriLogger struct{ l logr.Logger }

func (n nriLogger) Debugf(_ context.Context, f string, a ...any) { n.l.V(1).Info(fmt.Sprintf(f, a...)) }
func (n nriLogger) Infof(_ context.Context, f string, a ...any)  { n.l.V(1).Info(fmt.Sprintf(f, a...)) }
func (n nriLogger) Warnf(_ context.Context, f string, a ...any)  { n.l.Info(fmt.Sprintf(f, a...)) }
func (n nriLogger) Errorf(_ context.Context, f string, a ...any) {
	n.l.Error(fmt.Errorf(f, a...), "NRI")
}
