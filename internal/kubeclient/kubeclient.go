// Package kubeclient loads the API server client config of the binaries
// that talk to Kubernetes through client-go (the operator, the validator
// and discovery agent, the vGPU device manager, the VFIO manager), one way
// for all: an explicit --kubeconfig, else in-cluster, else $KUBECONFIG and
// ~/.kube/config. With internal/ownnode it is the one door to the API
// server: no other product package reads the pod's service account or
// builds its own HTTP client to it (internal/archtest TestOneAPIServerDoor).
// It links no Kubernetes API types (k8s.io/api), so that the VFIO manager
// does not either.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// FlagHelp is the --kubeconfig flag's help, the same in every binary.
const FlagHelp = "kubeconfig file (default: in-cluster, then $KUBECONFIG)"

// Config loads the client config from the kubeconfig file path ("" for
// the defaults).
func Config(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// Metadata is a metadata client from Config(path): objects as
// metav1.PartialObjectMetadata, linking no Kubernetes API types. (The
// typed client is ownnode.Clientset: this package stays as light.)
func Metadata(path string) (metadata.Interface, error) {
	cfg, err := Config(path)
	if err != nil {
		return nil, err
	}
	c, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return c, nil
}
