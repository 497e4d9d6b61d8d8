package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
	"github.com/sandbox-gpu/sandbox-gpu/test/internal/cluster"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// helmTimeout bounds each action's hooks, as the helm command's default --timeout does.
const helmTimeout = 5 * time.Minute

// release is the chart installed, upgraded and uninstalled with Helm's Go packages (what the helm
// command runs), its release record kept as a Secret in its namespace.
type release struct {
	name, namespace string
	cfg             *action.Configuration
	chart           *chart.Chart
}

// newRelease loads the chart of manifests/helm/sandbox-gpu for a release in an existing namespace.
func newRelease(t *testing.T, c *cluster.Cluster, name, namespace string) (*release, error) {
	root, err := e2e.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "manifests", "helm", "sandbox-gpu")
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load the chart %s: %w", dir, err)
	}
	cfg := &action.Configuration{}
	getter := &restGetter{config: c.RESTConfig, kubeconfig: c.Kubeconfig, namespace: namespace}
	if err := cfg.Init(getter, namespace, "secret", func(format string, args ...any) { t.Logf("helm: "+format, args...) }); err != nil {
		return nil, fmt.Errorf("helm configuration for release %s/%s: %w", namespace, name, err)
	}
	return &release{name: name, namespace: namespace, cfg: cfg, chart: chrt}, nil
}

// install is `helm install NAME CHART -n NAMESPACE` with values, not waiting (the tests poll).
func (r *release) install(ctx context.Context, values map[string]any) error {
	in := action.NewInstall(r.cfg)
	in.ReleaseName, in.Namespace, in.Timeout = r.name, r.namespace, helmTimeout
	if _, err := in.RunWithContext(ctx, r.chart, values); err != nil {
		return fmt.Errorf("helm install %s -n %s: %w", r.name, r.namespace, err)
	}
	return nil
}

// upgrade is `helm upgrade NAME CHART -n NAMESPACE` with the whole set of values.
func (r *release) upgrade(ctx context.Context, values map[string]any) error {
	up := action.NewUpgrade(r.cfg)
	up.Namespace, up.Timeout = r.namespace, helmTimeout
	if _, err := up.RunWithContext(ctx, r.name, r.chart, values); err != nil {
		return fmt.Errorf("helm upgrade %s -n %s: %w", r.name, r.namespace, err)
	}
	return nil
}

// uninstall is `helm uninstall NAME -n NAMESPACE`: its pre-delete hooks run to completion (within
// helmTimeout), the rest is deleted without waiting.
func (r *release) uninstall() error {
	un := action.NewUninstall(r.cfg)
	un.Timeout = helmTimeout
	if _, err := un.Run(r.name); err != nil {
		return fmt.Errorf("helm uninstall %s -n %s: %w", r.name, r.namespace, err)
	}
	return nil
}

// restGetter hands Helm the cluster's admin config, with discovery cached in memory (Helm's
// default getter caches it under $HOME/.kube).
type restGetter struct {
	config     *rest.Config
	kubeconfig string
	namespace  string
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.config), nil }

func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(g.config))
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	return memory.NewMemCacheClient(dc), nil
}

func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil), nil
}

func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: g.kubeconfig},
		&clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.namespace}})
}
