// Package apiserver gives a package's tests one real kube-apiserver and
// etcd (envtest), started by the first test that asks for it. Without
// KUBEBUILDER_ASSETS those tests fail (testutil.MissingPeer: outside CI,
// SANDBOX_GPU_SKIP_MISSING_PEERS=1 skips them instead).
//
//	var apiserver apiserver.Shared
//
//	func TestMain(m *testing.M) { os.Exit(apiserver.Run(m)) }
//
//	func TestX(t *testing.T) { cfg := apiserver.Config(t); ... }
//
// A test that needs one of its own calls Start.
package apiserver

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil"
)

// Shared is one package's envtest, started on first use.
type Shared struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

// Config starts the API server on the first call and returns a client
// config of it; a missing kube-apiserver fails tb (MissingPeer).
func (s *Shared) Config(tb testing.TB) *rest.Config {
	tb.Helper()
	testutil.EnvtestAssets(tb)
	s.once.Do(func() {
		s.env = &envtest.Environment{}
		s.cfg, s.err = s.env.Start()
		if s.err != nil {
			s.env = nil
		}
	})
	if s.err != nil {
		tb.Fatalf("envtest: %v", s.err)
	}
	return s.cfg
}

// Run runs the package's tests (TestMain's m) and stops the API server if
// one was started; it returns the exit code.
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	if s.env != nil {
		if err := s.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "envtest stop:", err)
		}
	}
	return code
}

// Start starts a kube-apiserver and etcd (envtest) for one test and stops
// them at its end; a missing kube-apiserver fails tb (MissingPeer). A
// package whose tests share one uses Shared.
func Start(tb testing.TB) *rest.Config {
	tb.Helper()
	testutil.EnvtestAssets(tb)
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		tb.Fatalf("envtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := env.Stop(); err != nil {
			tb.Errorf("envtest stop: %v", err)
		}
	})
	return cfg
}

// Kubeconfig writes cfg (an envtest API server's, client certificates) as
// a kubeconfig file for a program under test (--kubeconfig) and returns
// its path.
func Kubeconfig(tb testing.TB, cfg *rest.Config) string {
	tb.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(tb.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		tb.Fatal(err)
	}
	return p
}
