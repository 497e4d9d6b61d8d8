package nodereport

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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
	base, err := url.Parse(s.URL)
	if err != nil || base.Scheme != "https" || base.Host == "" {
		return nil, fmt.Errorf("API server %q: want an https:// URL", s.URL)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CA) {
		return nil, fmt.Errorf("API server %s: no certificate in its CA", s.URL)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		Proxy:           http.ProxyFromEnvironment,
	}}
	return func(ctx context.Context, node string, patch []byte) error {
		if node == "" || strings.ContainsAny(node, "/?#%") {
			return fmt.Errorf("node name %q is not valid", node)
		}
		token, err := os.ReadFile(s.TokenFile)
		if err != nil {
			return fmt.Errorf("node %s: token: %w", node, err)
		}
		u := base.JoinPath("api", "v1", "nodes", node)
		req, err := http.NewRequestWithContext(ctx, http.MethodPatch, u.String(), bytes.NewReader(patch))
		if err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
		req.Header.Set("Content-Type", "application/merge-patch+json")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("node %s: patch: %w", node, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("node %s: patch: %s: %s", node, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}, nil
}
