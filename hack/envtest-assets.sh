#!/usr/bin/env bash
# envtest-assets.sh builds the kube-apiserver and etcd that controller-runtime's envtest runs, from
# the Go module proxy alone (setup-envtest's asset download is not reachable everywhere), and prints
# the folder holding them on its last stdout line:
#
#   export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -1)
#
# The versions come from test/go.mod: kube-apiserver is k8s.io/kubernetes/cmd/kube-apiserver at the
# pinned k8s.io/kubernetes (with the staging replace block there), etcd is go.etcd.io/etcd/server/v3
# at the version k8s.io/kubernetes itself requires; test/tools/tools.go keeps both in go.mod/go.sum.
# Both are static (CGO_ENABLED=0), so only Go is needed. The binaries go to
# .cache/envtest-bin/<k8s version>/ (override the parent with SANDBOX_GPU_ENVTEST_BIN_DIR); a run
# whose binaries already report the expected versions builds nothing. A cold build takes several
# minutes and ~2.5 GB of memory on 2 cores; with a warm Go build cache, seconds.
# Progress goes to stderr; stdout carries only the folder.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
go=${GO:-go}

say() { printf 'envtest-assets: %s\n' "$*" >&2; }

# shellcheck source=hack/envtest-lib.sh
. "$root/hack/envtest-lib.sh"

enter_test_module
k8s_version=$(pinned_k8s_version)
etcd_version=$("$go" list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)

dir=${SANDBOX_GPU_ENVTEST_BIN_DIR:-$root/.cache/envtest-bin}/${k8s_version#v}

if envtest_up_to_date "$dir" "$k8s_version" "$etcd_version"; then
	say "kube-apiserver $k8s_version and etcd $etcd_version already in $dir"
	echo "$dir"
	exit 0
fi

envtest_build "$dir" "$k8s_version" "$etcd_version"
echo "$dir"
