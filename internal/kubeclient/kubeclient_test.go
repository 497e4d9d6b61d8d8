package kubeclient

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// An explicit kubeconfig is read; a missing one is an error naming it,
// never a silent fall back to another cluster.
func TestConfigFromKubeconfig(t *testing.T) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443"}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))

	cfg, err := Config(path)
	require.NoError(t, err)
	assert.Equal(t, "https://10.0.0.1:6443", cfg.Host)
	assert.Equal(t, "t", cfg.BearerToken)
	mc, err := Metadata(path)
	require.NoError(t, err)
	assert.NotNil(t, mc)

	missing := filepath.Join(t.TempDir(), "nope")
	_, err = Config(missing)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kubeconfig:")
	assert.Contains(t, err.Error(), missing)
	_, err = Metadata(missing)
	require.Error(t, err)
}
