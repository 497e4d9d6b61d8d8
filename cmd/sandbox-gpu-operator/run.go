package main

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/controllers"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
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
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "sandbox-gpu-operator.sandbox-gpu.io",
		LeaderElectionNamespace: o.namespace,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.healthAddr,
		// Cache only what is used: operand DaemonSets and operand pods in the
		// operand namespace (GPU pods are read from the API server, only
		// while a node switches).
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&appsv1.DaemonSet{}: {Namespaces: map[string]cache.Config{o.namespace: {}}},
				&corev1.Pod{}:       {Namespaces: map[string]cache.Config{o.namespace: {}}},
				&corev1.Node{}:      {Transform: controllers.TrimNode},
			},
		},
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if err := (&controllers.NodeReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("sandbox-gpu-operator"), Namespace: o.namespace}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controllers.PolicyReconciler{Client: mgr.GetClient(), Operands: operands.Options{Namespace: o.namespace, Registry: o.registry, Version: o.version}}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&controllers.KubeVirtReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	logStart(log, o)
	return mgr.Start(ctx)
}

func logStart(log logr.Logger, o options) {
	log.Info("Starting sandbox-gpu-operator", "namespace", o.namespace, "leaderElect", o.leaderElect)
}
