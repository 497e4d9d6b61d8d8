// Command apiprobe runs inside a pod of test/cluster: it calls kube-apiserver the way an in-cluster
// client does (the kubernetes Service from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the
// pod's service-account token, the mounted CA verifying the serving certificate) and prints the
// SelfSubjectReview kube-apiserver answers, which names the pod's service account. Only the
// standard library, so it builds static in seconds; busybox's own TLS cannot talk to a Go 1.26
// server (it leaves out the TLS 1.2 signature_algorithms extension).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "apiprobe:", err)
		os.Exit(1)
	}
}

func run() error {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT unset")
	}
	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s/ca.crt", saDir)
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	url := "https://" + net.JoinHostPort(host, port) + "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, out)
	}
	_, err = os.Stdout.Write(out)
	return err
}
