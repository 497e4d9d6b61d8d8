package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is the cluster's certificate authority and the files made from it, all under one folder.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	serial int64
}

// Paths of the files newPKI writes.
func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }
func (p *pki) caFile() string          { return p.path("ca.crt") }
func (p *pki) saKeyFile() string       { return p.path("sa.key") }
func (p *pki) saPubFile() string       { return p.path("sa.pub") }

// certOpts is one leaf certificate.
type certOpts struct {
	file   string // writes <file>.crt and <file>.key
	cn     string
	orgs   []string
	server bool // serving certificate (else client)
	dns    []string
	ips    []net.IP
}

// newPKI makes a CA, a service-account key pair and the certificates of every component in dir.
func newPKI(dir string, apiServerIPs []net.IP, nodeName string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	p := &pki{dir: dir}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sandbox-gpu-test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %w", err)
	}
	p.caKey, p.serial = key, 1
	if err := writePEM(p.caFile(), "CERTIFICATE", der); err != nil {
		return nil, err
	}
	if err := writeKey(p.path("ca.key"), key); err != nil {
		return nil, err
	}

	// The service-account token signing pair.
	saKey, err := newKey()
	if err != nil {
		return nil, err
	}
	if err := writeKey(p.saKeyFile(), saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("pki: service-account public key: %w", err)
	}
	if err := writePEM(p.saPubFile(), "PUBLIC KEY", pub); err != nil {
		return nil, err
	}

	leaves := []certOpts{
		{file: "apiserver", cn: "kube-apiserver", server: true, ips: apiServerIPs, dns: []string{
			"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		}},
		{file: "admin", cn: "sandbox-gpu-test-admin", orgs: []string{"system:masters"}},
		{file: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		{file: "kubelet", cn: "system:node:" + nodeName, orgs: []string{"system:nodes"}},
		{file: "controller-manager", cn: "system:kube-controller-manager"},
		{file: "scheduler", cn: "system:kube-scheduler"},
	}
	for _, l := range leaves {
		if err := p.issue(l); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// issue writes a certificate signed by the CA and its key.
func (p *pki) issue(o certOpts) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial),
		Subject:      pkix.Name{CommonName: o.cn, Organization: o.orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     o.dns,
		IPAddresses:  o.ips,
	}
	if o.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return fmt.Errorf("pki: certificate %s: %w", o.file, err)
	}
	if err := writePEM(p.path(o.file+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writeKey(p.path(o.file+".key"), key)
}

// writeKubeconfig writes a kubeconfig for the client certificate <file>.crt/.key at server.
func (p *pki) writeKubeconfig(path, file, server string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["sandbox-gpu-test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.caFile()}
	cfg.AuthInfos[file] = &clientcmdapi.AuthInfo{
		ClientCertificate: p.path(file + ".crt"),
		ClientKey:         p.path(file + ".key"),
	}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "sandbox-gpu-test", AuthInfo: file}
	cfg.CurrentContext = "default"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("pki: kubeconfig %s: %w", path, err)
	}
	return nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate key: %w", err)
	}
	return key, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: marshal key %s: %w", path, err)
	}
	return writePEM(path, "PRIVATE KEY", der)
}

func writePEM(path, kind string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}
