package vgpu

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// One real kube-apiserver and etcd (envtest) for the package's run-loop
// tests, started by the first test that needs it. Without KUBEBUILDER_ASSETS
// those tests fail (testutil.MissingPeer: outside CI,
// SANDBOX_GPU_SKIP_MISSING_PEERS=1 skips them instead).
var apiserver struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if apiserver.env != nil {
		if err := apiserver.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "envtest stop:", err)
		}
	}
	os.Exit(code)
}

func restConfig(t *testing.T) *rest.Config {
	t.Helper()
	testutil.EnvtestAssets(t) // fails without kube-apiserver and etcd (skips only where the shared opt-out says)
	apiserver.once.Do(func() {
		apiserver.env = &envtest.Environment{}
		apiserver.cfg, apiserver.err = apiserver.env.Start()
		if apiserver.err != nil {
			apiserver.env = nil
		}
	})
	if apiserver.err != nil {
		t.Fatalf("envtest: %v", apiserver.err)
	}
	return apiserver.cfg
}
