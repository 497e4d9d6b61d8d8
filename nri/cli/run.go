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
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandbox-gpu/sandbox-gpu/nri"
)

type options struct {
	nriSocket, podResources, cdiKind, index, name, injection, healthAddr string
	checkpoint                                                           string
	podResourcesTimeout                                                  time.Duration
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

// build turns options into the plugin's settings, its CDI resolver and its
// kubelet client (closed by the caller).
func build(o options, log logr.Logger) (nri.Options, *nri.Resolver, *nri.KubeletPodResources, error) {
	res, err := nri.NewResolver(o.cdiKind, o.cdiDirs.vals)
	if err != nil {
		return nri.Options{}, nil, nil, err
	}
	pods, err := nri.NewKubeletPodResources(o.podResources, o.podResourcesTimeout)
	if err != nil {
		return nri.Options{}, nil, nil, err
	}
	no := nri.Options{Resources: o.resources.vals, SkipRuntimeHandlers: o.skip.vals,
		AnnotationNamespaces: o.annotationNS.vals, FailOpen: o.failOpen, Injection: o.injection, Log: log}
	if o.checkpoint != "" {
		no.Checkpoint = &nri.Checkpoint{Path: o.checkpoint}
	}
	return no, res, pods, nil
}

func run(ctx context.Context, o options, stderr io.Writer) error {
	log := logger(stderr, o.verbose)
	no, res, pods, err := build(o, log)
	if err != nil {
		return err
	}
	closers := []func() error{pods.Close}
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	reg := prometheus.NewRegistry()
	p, err := nri.New(no, res, pods, reg)
	if err != nil {
		return err
	}
	if o.preregistered {
		p.SetReconfigure(func(config string) (nri.Options, *nri.Resolver, nri.PodResources, error) {
			co, err := parse(strings.Fields(config), io.Discard)
			if err != nil {
				return nri.Options{}, nil, nil, err
			}
			no, res, pods, err := build(co, logger(stderr, co.verbose))
			if err == nil {
				closers = append(closers, pods.Close)
				log.Info("Configured by the runtime", "podResources", co.podResources, "cdiDirs", co.cdiDirs.vals, "resources", co.resources.vals, "failOpen", co.failOpen)
			}
			return no, res, pods, err
		})
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
