package shell

import (
	"io"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandbox-gpu/sandbox-gpu/internal/jsonout"
)

// Env is what a command runs with.
type Env struct {
	Stdout, Stderr io.Writer
	// Log is the structured logger (JSON lines on Stderr).
	Log logr.Logger
	// Roots are the host roots from the flags (commands with Roots); a
	// program makes them its host model's options with internal/hostroots.
	Roots Roots
	// Metrics is served on /metrics; the Go and process collectors are in.
	Metrics *prometheus.Registry
	// Args are the positional arguments (commands with Args).
	Args []string

	verbosity  verbosity
	health     *health
	listenAddr string
	gatherer   prometheus.Gatherer
}

// ServeMetricsFrom makes /metrics serve g instead of Metrics: the operator
// serves controller-runtime's registry, which has the Go and process
// collectors already.
func (e *Env) ServeMetricsFrom(g prometheus.Gatherer) { e.gatherer = g }

// ListenAddr is the address the health listener is bound to ("" when off).
func (e *Env) ListenAddr() string { return e.listenAddr }

// Verbosity is the -v level.
func (e *Env) Verbosity() int { return int(e.verbosity) }

// AddReady adds a readiness check: /readyz answers 200 only while every
// check passes.
func (e *Env) AddReady(name string, c Check) { e.health.add(&e.health.ready, name, c) }

// AddLive adds a liveness check for /healthz.
func (e *Env) AddLive(name string, c Check) { e.health.add(&e.health.live, name, c) }

// Report writes a command's report on Stdout: as indented JSON when output
// is "json", else through table. refused > 0 then ends the command with
// ErrRefused (exit 2), quietly: the report names each refusal.
func (e *Env) Report(output string, report any, table func(io.Writer) error, refused int) error {
	var err error
	if output == "json" {
		err = jsonout.Write(e.Stdout, report)
	} else {
		err = table(e.Stdout)
	}
	if err != nil {
		return err
	}
	if refused > 0 {
		return Quiet(ErrRefused)
	}
	return nil
}
