#!/usr/bin/env bash
# fetch-cluster.sh installs and builds every part of the one-node cluster that test/cluster starts
# (test/internal/cluster), from the Go module proxy and Debian's packages alone:
#
#   - apt: runc, busybox-static, containernetworking-plugins (the bridge, host-local and loopback CNI
#     plugins in /usr/lib/cni), iptables (the kubelet's and the bridge plugin's chains), util-linux
#     (unshare, mount), procps (sysctl), kmod and iproute2;
#   - kube-apiserver and etcd: hack/envtest-assets.sh (.cache/envtest-bin/<k8s version>);
#   - containerd 2.4.2, its runc shim, ctr and the busybox OCI image: hack/fetch-containerd.sh
#     (.cache/containerd);
#   - kubelet, kube-controller-manager and kube-scheduler from k8s.io/kubernetes at the version
#     pinned in test/go.mod (with its staging replace block; test/tools/tools.go keeps them in
#     go.mod/go.sum), static (CGO_ENABLED=0) and stamped like a release build, into
#     .cache/cluster-bin/<k8s version>/ (override the parent with SANDBOX_GPU_CLUSTER_BIN_DIR).
#
# Every step is skipped when already done: binaries that report the expected --version are not
# rebuilt, and a new build is renamed into place only once complete. A cold build of the three
# Kubernetes binaries takes ~20 minutes and ~3 GB of memory on 2 cores; with a warm Go build cache,
# seconds; a run with everything in place, about a second. Needs root (or sudo) for apt-get when
# packages are missing. Progress goes to stderr; the last stdout line is the cluster-bin folder.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
go=${GO:-go}

say() { printf 'fetch-cluster: %s\n' "$*" >&2; }

# shellcheck source=hack/apt-lib.sh
. "$root/hack/apt-lib.sh"
# shellcheck source=hack/envtest-lib.sh
. "$root/hack/envtest-lib.sh"

# 1. Host packages, only those missing.
# pci.ids: the naming tests and the KubeVirt plugin's RSS benchmark read the system file.
apt_install_missing runc busybox-static containernetworking-plugins iptables util-linux procps kmod iproute2 pci.ids

# 2. The parts other scripts own (each cached on its own).
GO=$go "$root/hack/envtest-assets.sh" >/dev/null
GO=$go "$root/hack/fetch-containerd.sh" >/dev/null

# 3. kubelet, kube-controller-manager and kube-scheduler.
enter_test_module
k8s_version=$(pinned_k8s_version)
dir=${SANDBOX_GPU_CLUSTER_BIN_DIR:-$root/.cache/cluster-bin}/${k8s_version#v}
bins=(kubelet kube-controller-manager kube-scheduler)

if k8s_binaries_up_to_date "$dir" "$k8s_version" "${bins[@]}"; then
	say "${bins[*]} $k8s_version already in $dir"
	echo "$dir"
	exit 0
fi

ldflags=$(k8s_ldflags "$k8s_version")
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
say "building ${bins[*]} $k8s_version ($("$go" env GOVERSION)) into $dir (cold: ~20 min on 2 cores)"
start=$SECONDS
pkgs=()
for b in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
# One go build for all three: they share most of their dependencies.
CGO_ENABLED=${CLUSTER_CGO_ENABLED:-0} "$go" build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
# Rename into place, so an interrupted build never leaves a half-written binary behind.
for b in "${bins[@]}"; do mv -f "$tmp/$b" "$dir/$b"; done
say "built in $((SECONDS - start)) s"
if ! k8s_binaries_up_to_date "$dir" "$k8s_version" "${bins[@]}"; then
	say "the built binaries do not all report Kubernetes $k8s_version:"
	for b in "${bins[@]}"; do "$dir/$b" --version >&2 || true; done
	exit 1
fi
echo "$dir"
