package nodereport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ServiceAccountDir is where the kubelet mounts a pod's service account
// token and the cluster's CA.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Server is how to reach the API server: its URL, the CA that signs it,
// and the file holding the bearer token (read at every request: the
// kubelet rotates bound tokens).
type Server struct {
	URL       string
	CA        []byte
	TokenFile string
	// Timeout bounds one request (default 10s).
	Timeout time.Duration
}

// InClusterServer is the pod's own API server, from KUBERNETES_SERVICE_HOST
// and _PORT and the service account folder; an error when not in a pod
// with a token.
func InClusterServer() (Server, error) {
	hostEnv, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if hostEnv == "" || port == "" {
		return Server{}, errors.New("not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset")
	}
	ca, err := os.ReadFile(filepath.Join(ServiceAccountDir, "ca.crt"))
	if err != nil {
		return Server{}, fmt.Errorf("in-cluster CA: %w", err)
	}
	token := filepath.Join(ServiceAccountDir, "token")
	if _, err := os.Stat(token); err != nil {
		return Server{}, fmt.Errorf("in-cluster token: %w", err)
	}
	return Server{URL: "https://" + net.JoinHostPort(hostEnv, port), CA: ca, TokenFile: token}, nil
}

// NodePatcher returns a PatchFunc that sends a JSON merge patch of a Node
// to the server.
func (s Server) NodePatcher() (PatchFunc, error) {
	c, err := s.Client()
	if err != nil {
		return nil, err
	}
	return c.PatchNode, nil
}
