package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbox-gpu/sandbox-gpu/validator"
)

type options struct {
	kubeconfig, nodeName, vfioReady, permitted, healthAddr string
	resync                                                 time.Duration
	verbosity                                              int
}

func run(ctx context.Context, o options, stderr io.Writer) error {
	log := funcr.NewJSON(func(obj string) { fmt.Fprintln(stderr, obj) }, funcr.Options{Verbosity: o.verbosity, LogTimestamp: true})
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	v, err := validator.New(validator.Options{NodeName: o.nodeName, Client: cs, VFIOReadyFile: o.vfioReady,
		PermittedFile: o.permitted, Resync: o.resync, Log: log})
	if err != nil {
		return err
	}
	if o.healthAddr != "" {
		ln, err := net.Listen("tcp", o.healthAddr)
		if err != nil {
			return fmt.Errorf("health address %s: %w", o.healthAddr, err)
		}
		srv := &http.Server{Handler: handler(v), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "Health server stopped")
			}
		}()
		defer srv.Close()
	}
	log.Info("Validating", "node", o.nodeName)
	return v.Run(ctx)
}

func handler(v *validator.Validator) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		r := v.Report()
		w.Header().Set("Content-Type", "application/json")
		if !r.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(r)
	})
	return mux
}
