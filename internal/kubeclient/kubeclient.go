// Package kubeclient loads the API server client config of the binaries
// that talk to Kubernetes through client-go (the operator, the validator
// and discovery agent, the vGPU device manager, the VFIO manager), one way
// for all: an explicit --kubeconfig, else in-cluster, else $KUBECONFIG and
// ~/.kube/config. With internal/ownnode it is the one door to the API
// server: no other product package reads the pod's service account or
// builds its own HTTP client to it (internal/archtest TestOneAPIServerDoor).
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
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

// Clientset is a typed client from Config(path).
func Clientset(path string) (kubernetes.Interface, error) {
	cfg, err := Config(path)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return cs, nil
}
