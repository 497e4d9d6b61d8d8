package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"github.com/sandbox-gpu/sandbox-gpu/internal/names"
	"github.com/sandbox-gpu/sandbox-gpu/vfio"
)

// runDaemon runs the VFIO manager as a node daemon: it holds the desired
// state (flags or --config), publishes readiness, and changes nothing on
// shutdown.
func runDaemon(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c common
	var config, readyDir, healthAddr string
	var resync time.Duration
	var verbose bool
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	c.register(fs, true)
	fs.StringVar(&config, "config", "", "desired-state file (YAML or JSON: vendor, all, nvswitches, devices, host); watched for changes")
	fs.StringVar(&readyDir, "ready-dir", "/run/sandbox-gpu", "folder for the readiness file "+names.VFIOReadyFile+" (empty: none)")
	fs.StringVar(&healthAddr, "health-addr", ":8081", "address of /healthz, /readyz and /metrics (empty: none)")
	fs.DurationVar(&resync, "resync", 5*time.Minute, "period of the safety-net reconcile")
	fs.BoolVar(&verbose, "v", false, "verbose logging")
	if err := parse(fs, args, stdout); err != nil {
		if errors.Is(err, errHelp) {
			return nil
		}
		return err
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	log := logr.FromSlogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	desired := vfio.Desired{Vendor: c.vendor, All: c.all, NVSwitches: c.nvswitches, Devices: c.devices}
	if config == "" && !c.all && len(c.devices) == 0 {
		desired.All = true // a node daemon with no selection manages every function of the vendor
	}
	h, cleanup, err := c.hostFor(!c.noModprobe)
	if err != nil {
		return err
	}
	defer cleanup()
	d, err := vfio.NewDaemon(vfio.DaemonOptions{Host: h, Desired: desired, ConfigFile: config, ReadyDir: readyDir, Resync: resync, Log: log, LockFile: c.lockPath()})
	if err != nil {
		return err
	}
	if healthAddr != "" {
		ln, err := net.Listen("tcp", healthAddr)
		if err != nil {
			return fmt.Errorf("health endpoint %s: %w", healthAddr, err)
		}
		srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("Serving health endpoints", "address", ln.Addr().String())
	}
	return d.Run(ctx)
}
