package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandbox-gpu/sandbox-gpu/nri"
)

type options struct {
	nriSocket, podResources, cdiKind, index, name, injection, healthAddr string
	sysfsRoot, devRoot, procRoot                                         string
	cdiDirs, resources, skip, annotationNS                               listFlag
	failOpen, verbose, preregistered                                     bool
}

func logger(stderr io.Writer, verbose bool) logr.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return logr.FromSlogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
}

func run(ctx context.Context, o options, stderr io.Writer) error {
	log := logger(stderr, o.verbose)
	if len(o.index) != 2 || o.index[0] < '0' || o.index[0] > '9' || o.index[1] < '0' || o.index[1] > '9' {
		return fmt.Errorf("--plugin-index %q: want two digits", o.index)
	}
	res, err := nri.NewResolver(o.cdiKind, o.cdiDirs.vals)
	if err != nil {
		return err
	}
	pods, err := nri.NewKubeletPodResources(o.podResources, 2*time.Second)
	if err != nil {
		return err
	}
	defer pods.Close()
	reg := prometheus.NewRegistry()
	p, err := nri.New(nri.Options{Resources: o.resources.vals, SkipRuntimeHandlers: o.skip.vals,
		AnnotationNamespaces: o.annotationNS.vals, FailOpen: o.failOpen, Injection: o.injection, Log: log}, res, pods, reg)
	if err != nil {
		return err
	}
	var connected atomic.Bool
	if o.healthAddr != "" {
		ln, err := net.Listen("tcp", o.healthAddr)
		if err != nil {
			return fmt.Errorf("health address %s: %w", o.healthAddr, err)
		}
		srv := &http.Server{Handler: handler(&connected, reg), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "Health server stopped")
			}
		}()
		defer srv.Close()
	}
	log.Info("Starting", "nriSocket", o.nriSocket, "podResources", o.podResources, "cdiDirs", o.cdiDirs.vals,
		"resources", o.resources.vals, "cdiKind", o.cdiKind, "failOpen", o.failOpen, "preregistered", o.preregistered)
	err = p.Run(ctx, nri.RunOptions{Socket: o.nriSocket, Name: o.name, Index: o.index, Preregistered: o.preregistered,
		Connected: connected.Store})
	log.Info("Stopped")
	return err
}

func handler(connected *atomic.Bool, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !connected.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]bool{"connected": connected.Load()})
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
