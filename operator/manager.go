// Package operator assembles the operator: one controller-runtime manager
// running the node, policy and KubeVirt reconcilers over a trimmed cache.
package operator

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/sandbox-gpu/sandbox-gpu/operator/api/v1alpha1"
	"github.com/sandbox-gpu/sandbox-gpu/operator/controllers"
	"github.com/sandbox-gpu/sandbox-gpu/operator/operands"
)

// Options configure the operator.
type Options struct {
	// Namespace holds the operand DaemonSets (and the leader lease).
	Namespace string
	// Registry and Version give the default operand images.
	Registry, Version string
	// ImagePullSecrets and ImagePullPolicy go to every operand pod (the
	// policy's spec.imagePullSecrets are added, its imagePullPolicy wins).
	ImagePullSecrets []string
	ImagePullPolicy  corev1.PullPolicy
	LeaderElection   bool
	// MetricsAddr and HealthAddr: "0" turns them off.
	MetricsAddr, HealthAddr string
	// MetricsRegistry takes the operator's own metrics (nil:
	// controller-runtime's registry, served on MetricsAddr's /metrics).
	MetricsRegistry prometheus.Registerer
}

// Scheme holds the types the operator reads and writes.
func Scheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return scheme, nil
}

// NewManager builds the operator's manager; Start runs it.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "sandbox-gpu-operator.sandbox-gpu.io",
		LeaderElectionNamespace: o.Namespace,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.HealthAddr,
		Cache:                   controllers.CacheOptions(o.Namespace),
	})
	if err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	reg := o.MetricsRegistry
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	m, err := controllers.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	if err := (&controllers.NodeReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("sandbox-gpu-operator"), Namespace: o.Namespace, Metrics: m}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&controllers.PolicyReconciler{Client: mgr.GetClient(), Metrics: m,
		Operands: operands.Options{Namespace: o.Namespace, Registry: o.Registry, Version: o.Version,
			ImagePullSecrets: o.ImagePullSecrets, ImagePullPolicy: o.ImagePullPolicy}}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&controllers.KubeVirtReconciler{Client: mgr.GetClient(), Metrics: m}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
