# envtest-lib.sh: what hack/envtest-assets.sh, hack/envtest-assets-version.sh and
# hack/fetch-cluster.sh share. Sourced, not run; the caller sets `root` and `go` and defines `say`.

# enter_test_module changes to the test module, where test/go.mod alone decides the versions: no
# workspace, no go.mod edits.
enter_test_module() {
	cd "$root/test" || return 1
	export GOWORK=off
	export GOFLAGS="${GOFLAGS:-} -mod=readonly"
}

# pinned_k8s_version prints the k8s.io/kubernetes release test/go.mod pins (run it in the test
# module); it fails, saying so, on anything but a release version (v1.x.y).
pinned_k8s_version() {
	local v
	v=$("$go" list -m -f '{{.Version}}' k8s.io/kubernetes) || return 1
	case "$v" in
	v1.*.*) printf '%s\n' "$v" ;;
	*)
		say "unexpected k8s.io/kubernetes version '$v' in test/go.mod"
		return 1
		;;
	esac
}

# k8s_ldflags K8S_VERSION prints the -ldflags that stamp a Kubernetes binary the way a release build
# is (kube-apiserver derives its binary and emulation version from gitVersion; the unstamped
# default is v0.0.0-master). Run it in the module that pins k8s.io/kubernetes (for the build date).
k8s_ldflags() {
	local k8s_version=$1 major minor build_date ldflags pkg
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
	printf '%s\n' "$ldflags"
}

# k8s_binaries_up_to_date DIR K8S_VERSION NAME... reports whether DIR holds every named Kubernetes
# binary and each says "Kubernetes K8S_VERSION" to --version.
k8s_binaries_up_to_date() {
	local dir=$1 k8s_version=$2 name
	shift 2
	for name in "$@"; do
		[ -x "$dir/$name" ] || return 1
		[ "$("$dir/$name" --version 2>/dev/null)" = "Kubernetes $k8s_version" ] || return 1
	done
}

# envtest_up_to_date DIR K8S_VERSION ETCD_VERSION reports whether DIR holds kube-apiserver and etcd
# at those versions.
envtest_up_to_date() {
	local dir=$1 k8s_version=$2 etcd_version=$3 etcd_out
	[ -x "$dir/etcd" ] || return 1
	k8s_binaries_up_to_date "$dir" "$k8s_version" kube-apiserver || return 1
	# Captured first: under pipefail, grep -q quitting at the first line would make etcd die of
	# SIGPIPE on its next write (etcd writes each version line separately) and fail the pipe.
	etcd_out=$("$dir/etcd" --version 2>/dev/null) || return 1
	grep -qx "etcd Version: ${etcd_version#v}" <<<"$etcd_out"
}

# envtest_build DIR K8S_VERSION ETCD_VERSION builds both binaries from the module in the current
# folder into DIR, stamped the way a Kubernetes release build is (k8s_ldflags), and checks them.
envtest_build() {
	local dir=$1 k8s_version=$2 etcd_version=$3
	local ldflags tmp start
	ldflags=$(k8s_ldflags "$k8s_version")
	mkdir -p "$dir"
	tmp=$(mktemp -d "$dir/.build.XXXXXX")
	say "building kube-apiserver $k8s_version and etcd $etcd_version ($("$go" env GOVERSION)) into $dir (cold: several minutes)"
	start=$(date +%s)
	# One go build for both: they share most of their dependencies. The etcd main package is the
	# root of the etcd server module, so go build names its binary "server".
	if ! CGO_ENABLED=${ENVTEST_CGO_ENABLED:-0} "$go" build -trimpath -ldflags "$ldflags" -o "$tmp/" \
		k8s.io/kubernetes/cmd/kube-apiserver go.etcd.io/etcd/server/v3; then
		rm -rf "$tmp"
		return 1
	fi
	mv "$tmp/server" "$tmp/etcd"
	# Rename into place, so an interrupted build never leaves a half-written binary behind.
	mv -f "$tmp/kube-apiserver" "$dir/kube-apiserver"
	mv -f "$tmp/etcd" "$dir/etcd"
	rm -rf "$tmp"
	say "built in $(($(date +%s) - start))s"
	if ! envtest_up_to_date "$dir" "$k8s_version" "$etcd_version"; then
		say "the built binaries do not report kube-apiserver $k8s_version and etcd $etcd_version:"
		"$dir/kube-apiserver" --version >&2 || true
		"$dir/etcd" --version >&2 || true
		return 1
	fi
}
