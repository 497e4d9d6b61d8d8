package vgpu

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// One real kube-apiserver and etcd (envtest) for the package's run-loop
// tests, started by the first test that needs it. Without KUBEBUILDER_ASSETS
// those tests fail, unless SANDBOX_GPU_REQUIRE_ENVTEST=0 lets them skip.
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
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		msg := "KUBEBUILDER_ASSETS is unset: run `export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -1)` (make test does), or set SANDBOX_GPU_REQUIRE_ENVTEST=0 to skip"
		if os.Getenv("SANDBOX_GPU_REQUIRE_ENVTEST") == "0" {
			t.Skip(msg)
		}
		t.Fatal(msg)
	}
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
