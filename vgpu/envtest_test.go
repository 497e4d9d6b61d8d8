package vgpu

import (
	"os"
	"testing"

	"k8s.io/client-go/rest"

	sharedapi "github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
)

// One real kube-apiserver and etcd (envtest) for the package's run-loop
// tests, started by the first test that needs it. Without KUBEBUILDER_ASSETS
// those tests fail (testutil.MissingPeer: outside CI,
// SANDBOX_GPU_SKIP_MISSING_PEERS=1 skips them instead).
var apiserver sharedapi.Shared

func TestMain(m *testing.M) { os.Exit(apiserver.Run(m)) }

func restConfig(t *testing.T) *rest.Config {
	t.Helper()
	return apiserver.Config(t)
}
