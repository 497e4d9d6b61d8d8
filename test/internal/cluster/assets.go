package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sandbox-gpu/sandbox-gpu/internal/testutil/e2e"
)

// InstallHint says how to get every part of the cluster.
const InstallHint = "run `make test-deps` (or hack/fetch-cluster.sh, as root: it installs runc, busybox-static, " +
	"containernetworking-plugins, iptables and util-linux with apt and builds kube-apiserver, etcd, kubelet, " +
	"kube-controller-manager, kube-scheduler and containerd from the Go module proxy into .cache/)"

// Environment variables that move the cached parts (as the hack/ scripts do).
const (
	envtestBinEnv = "SANDBOX_GPU_ENVTEST_BIN_DIR" // parent of <k8s version>/{kube-apiserver,etcd}
	clusterBinEnv = "SANDBOX_GPU_CLUSTER_BIN_DIR" // parent of <k8s version>/{kubelet,kube-controller-manager,kube-scheduler}
	containerdEnv = "SANDBOX_GPU_CONTAINERD_DIR"  // bin/{containerd,containerd-shim-runc-v2,ctr} and busybox-oci.tar
)

// Host programs the cluster runs (Debian's paths).
const (
	runcPath = "/usr/sbin/runc"
	cniDir   = "/usr/lib/cni"
)

// BusyboxImage is the image of hack/fetch-containerd.sh's busybox-oci.tar: a busybox-static root
// filesystem whose default command sleeps. It is the pinned pause image and a workload image.
const BusyboxImage = "localhost/sandbox-gpu/busybox:test"

// Assets are the programs and files the cluster needs.
type Assets struct {
	K8sVersion    string // v1.36.3, from test/go.mod
	APIServer     string
	Etcd          string
	Kubelet       string
	Controller    string // kube-controller-manager
	Scheduler     string
	ContainerdBin string // folder with containerd, containerd-shim-runc-v2 and ctr
	BusyboxTar    string // OCI image-layout tarball of BusyboxImage
}

// MissingError names the parts of the cluster that are not installed.
type MissingError struct{ Missing []string }

func (e *MissingError) Error() string {
	return fmt.Sprintf("cluster: missing parts:\n  %s\n%s", strings.Join(e.Missing, "\n  "), InstallHint)
}

// FindAssets finds every part the hack/ scripts install, at the Kubernetes version of test/go.mod, and
// checks the host programs; a *MissingError lists what is missing.
func FindAssets() (*Assets, error) {
	root, err := e2e.RepoRoot()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	version, err := kubernetesVersion(filepath.Join(root, "test", "go.mod"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	dirOf := func(env, def string) string {
		if d := os.Getenv(env); d != "" {
			return d
		}
		return filepath.Join(root, ".cache", def)
	}
	envtestDir := filepath.Join(dirOf(envtestBinEnv, "envtest-bin"), strings.TrimPrefix(version, "v"))
	clusterDir := filepath.Join(dirOf(clusterBinEnv, "cluster-bin"), strings.TrimPrefix(version, "v"))
	ctrdDir := dirOf(containerdEnv, "containerd")
	a := &Assets{
		K8sVersion:    version,
		APIServer:     filepath.Join(envtestDir, "kube-apiserver"),
		Etcd:          filepath.Join(envtestDir, "etcd"),
		Kubelet:       filepath.Join(clusterDir, "kubelet"),
		Controller:    filepath.Join(clusterDir, "kube-controller-manager"),
		Scheduler:     filepath.Join(clusterDir, "kube-scheduler"),
		ContainerdBin: filepath.Join(ctrdDir, "bin"),
		BusyboxTar:    filepath.Join(ctrdDir, "busybox-oci.tar"),
	}
	var missing []string
	check := func(path string) {
		if _, err := exec.LookPath(path); err != nil {
			missing = append(missing, path)
		}
	}
	for _, p := range []string{a.APIServer, a.Etcd, a.Kubelet, a.Controller, a.Scheduler,
		a.containerd("containerd"), a.containerd("containerd-shim-runc-v2"), a.containerd("ctr"),
		runcPath, filepath.Join(cniDir, "bridge"), filepath.Join(cniDir, "host-local"), filepath.Join(cniDir, "loopback")} {
		check(p)
	}
	for _, prog := range []string{"unshare", "nsenter", "mount", "iptables-save", "iptables-restore", "ip"} {
		if _, err := exec.LookPath(prog); err != nil {
			missing = append(missing, prog+" (on PATH)")
		}
	}
	if _, err := os.Stat(a.BusyboxTar); err != nil {
		missing = append(missing, a.BusyboxTar)
	}
	if len(missing) > 0 {
		return nil, &MissingError{Missing: missing}
	}
	// Binaries of another version (test/go.mod bumped) count as missing: the scripts rebuild them.
	for _, p := range []string{a.APIServer, a.Kubelet, a.Controller, a.Scheduler} {
		out, err := exec.Command(p, "--version").Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != "Kubernetes "+version {
			missing = append(missing, fmt.Sprintf("%s at %s (it reports %q, %v)", p, version, got, err))
		}
	}
	if len(missing) > 0 {
		return nil, &MissingError{Missing: missing}
	}
	return a, nil
}

func (a *Assets) containerd(name string) string { return filepath.Join(a.ContainerdBin, name) }

// IsMissing reports whether err says that parts of the cluster are not installed.
func IsMissing(err error) bool {
	var m *MissingError
	return errors.As(err, &m)
}

// kubernetesVersion reads the k8s.io/kubernetes requirement of a go.mod.
func kubernetesVersion(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == "k8s.io/kubernetes" && strings.HasPrefix(fields[1], "v1.") {
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", gomod, err)
	}
	return "", fmt.Errorf("no k8s.io/kubernetes requirement in %s", gomod)
}
