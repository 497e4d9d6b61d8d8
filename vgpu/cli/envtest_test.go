package cli

import (
	"os"
	"testing"

	sharedapi "github.com/sandbox-gpu/sandbox-gpu/internal/testutil/apiserver"
)

// One real kube-apiserver and etcd (envtest) for the tests of `run`,
// started by the first test that needs it. Without KUBEBUILDER_ASSETS those
// tests fail (testutil.MissingPeer: outside CI,
// SANDBOX_GPU_SKIP_MISSING_PEERS=1 skips them instead).
var apiserver sharedapi.Shared

func TestMain(m *testing.M) { os.Exit(apiserver.Run(m)) }
