package main

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sandbox-gpu/sandbox-gpu/operator"
)

type options struct {
	kubeconfig, namespace, registry, version string
	leaderElect                              bool
	qps                                      float64
	burst                                    int
	metricsAddr, healthAddr                  string
}

func run(ctx context.Context, o options) error {
	log := zap.New()
	ctrl.SetLogger(log)
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	mgr, err := operator.NewManager(cfg, operator.Options{Namespace: o.namespace, Registry: o.registry, Version: o.version,
		LeaderElection: o.leaderElect, MetricsAddr: o.metricsAddr, HealthAddr: o.healthAddr})
	if err != nil {
		return err
	}
	logStart(log, o)
	return mgr.Start(ctx)
}

func logStart(log logr.Logger, o options) {
	log.Info("Starting sandbox-gpu-operator", "namespace", o.namespace, "leaderElect", o.leaderElect)
}
