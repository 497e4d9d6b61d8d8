// Package helm renders the sandbox-gpu Helm chart with Helm's Go packages and applies the result to
// a real kube-apiserver (envtest) with a server-side dry run.
package helm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// chartDir is the chart under test, relative to this package.
const chartDir = "../../manifests/helm/sandbox-gpu"

var (
	// k8sClient talks to the package's envtest kube-apiserver; nil when skipReason is set.
	k8sClient client.Client
	// restConfig is k8sClient's, for clients that impersonate an account.
	restConfig *rest.Config
	// serverVersion is the kube-apiserver's git version, for the chart's kubeVersion constraint.
	serverVersion string
	// skipReason, when set, makes every test skip.
	skipReason string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		skipReason = "KUBEBUILDER_ASSETS is unset: point it at kube-apiserver and etcd binaries " +
			"(KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -1)) to run the Helm chart dry-run tests"
		return m.Run()
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		if err := os.Setenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT", "60s"); err != nil {
			fmt.Fprintf(os.Stderr, "set start timeout: %v\n", err)
			return 1
		}
	}
	env := &envtest.Environment{
		CRDInstallOptions: envtest.CRDInstallOptions{
			// The Prometheus Operator's CRDs (testdata/monitoring-crds/README.md), so that the optional
			// ServiceMonitor and PodMonitor are dry-run against their real schema.
			// And the operator tests' stand-in for KubeVirt's CRD, whose CR the operator's admission
			// policy bounds.
			Paths: []string{filepath.Join(chartDir, "crds"), filepath.Join("testdata", "monitoring-crds"),
				filepath.Join("..", "..", "operator", "controllers", "testdata", "crds")},
			ErrorIfPathMissing: true,
		},
	}
	if _, err := env.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "start envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}()
	if err := connect(env); err != nil {
		fmt.Fprintf(os.Stderr, "set up envtest: %v\n", err)
		return 1
	}
	return m.Run()
}

// connect builds k8sClient from env's config and creates the release namespaces for real.
func connect(env *envtest.Environment) error {
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		return fmt.Errorf("new discovery client: %w", err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("server version: %w", err)
	}
	ctx := context.Background()
	for _, ns := range []string{releaseNamespace, otherNamespace} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	}
	k8sClient, serverVersion, restConfig = c, v.GitVersion, env.Config
	return nil
}

// requireEnv skips the test when no kube-apiserver is available.
func requireEnv(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		testutil.MissingPeer(t, "%s", skipReason)
	}
}
