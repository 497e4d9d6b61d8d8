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

cd "$root/test"
# The test module alone decides the versions: no workspace, no go.mod edits.
export GOWORK=off
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

k8s_version=$("$go" list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$("$go" list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
case "$k8s_version" in
v1.*.*) ;;
*)
	say "unexpected k8s.io/kubernetes version '$k8s_version' in test/go.mod"
	exit 1
	;;
esac

dir=${SANDBOX_GPU_ENVTEST_BIN_DIR:-$root/.cache/envtest-bin}/${k8s_version#v}

# up_to_date reports whether dir holds both binaries at the expected versions.
up_to_date() {
	[ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ] || return 1
	[ "$("$dir/kube-apiserver" --version 2>/dev/null)" = "Kubernetes $k8s_version" ] || return 1
	# Read the whole output first: grep -q would stop reading at the first match, and the SIGPIPE
	# etcd then gets fails the pipeline under pipefail when etcd is slower than grep.
	local out
	out=$("$dir/etcd" --version 2>/dev/null) || return 1
	grep -qx "etcd Version: ${etcd_version#v}" <<<"$out"
}

if up_to_date; then
	say "kube-apiserver $k8s_version and etcd $etcd_version already in $dir"
	echo "$dir"
	exit 0
fi

# Stamp the Kubernetes version the way its release build does: kube-apiserver derives its binary
# and emulation version from gitVersion, and the unstamped default is v0.0.0-master.
major=${k8s_version#v}
major=${major%%.*}
minor=${k8s_version#v"$major".}
minor=${minor%%.*}
build_date=$("$go" list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
	if [ -n "$build_date" ]; then ldflags+=" -X $pkg.buildDate=$build_date"; fi
done

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

say "building kube-apiserver $k8s_version and etcd $etcd_version into $dir (cold: several minutes)"
start=$(date +%s)
# One go build for both: they share most of their dependencies. The etcd main package is the root
# of the etcd server module, so go build names its binary "server".
CGO_ENABLED=${ENVTEST_CGO_ENABLED:-0} "$go" build -trimpath -ldflags "$ldflags" -o "$tmp/" \
	k8s.io/kubernetes/cmd/kube-apiserver go.etcd.io/etcd/server/v3
mv "$tmp/server" "$tmp/etcd"
# Rename into place, so an interrupted build never leaves a half-written binary behind.
mv -f "$tmp/kube-apiserver" "$dir/kube-apiserver"
mv -f "$tmp/etcd" "$dir/etcd"
say "built in $(($(date +%s) - start))s"

if ! up_to_date; then
	say "the built binaries do not report kube-apiserver $k8s_version and etcd $etcd_version:"
	"$dir/kube-apiserver" --version >&2 || true
	"$dir/etcd" --version >&2 || true
	exit 1
fi
echo "$dir"
