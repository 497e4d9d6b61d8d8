#!/usr/bin/env bash
# images.sh builds one OCI image archive per shipped binary (every directory of cmd/ but the demo) with
# no container daemon, and pushes them.
#
#   hack/images.sh [build]   builds the binaries reproducibly into $BIN_DIR, fetches Debian's libc6 for the
#                            cgo ones (into .cache/libc6), and writes $OUT/<binary>.tar with hack/imagebuild
#                            (go-containerregistry): an OCI image layout in a tar, for `ctr images import`
#                            and `skopeo copy oci-archive:`. Prints each image's name, digest and size.
#   hack/images.sh push      pushes every archive of $OUT to $REGISTRY (INSECURE=1: plain HTTP allowed).
#   hack/images.sh libc6     fetches libc6 only; prints its folder (root/, version, sha256, index).
#   hack/images.sh deps      installs what hack/imagebuild's tests need from apt (docker-registry), if missing.
#
# Environment: REGISTRY (ghcr.io/sandbox-gpu), VERSION (v0.1.0), BIN_DIR (bin), OUT (bin/images),
# CGO_BINARIES (nri-gpu-plugin vgpu-device-manager: built with cgo, as `make build` does), BINARIES (default: all shipped),
# SOURCE_DATE_EPOCH (default: HEAD's commit time), REVISION (default: git HEAD; for a tree outside git),
# INSECURE (0), DEBIAN_KEYRING (/usr/share/keyrings/debian-archive-keyring.gpg: the keys Debian's index
# must be signed by). Same sources, same digests.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
REGISTRY=${REGISTRY:-ghcr.io/sandbox-gpu}
VERSION=${VERSION:-v0.1.0}
BIN_DIR=${BIN_DIR:-bin}
OUT=${OUT:-bin/images}
CGO_BINARIES=${CGO_BINARIES:-nri-gpu-plugin vgpu-device-manager}
INSECURE=${INSECURE:-0}
DEBIAN_KEYRING=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
go=${GO:-go}
cache=$root/.cache

say() { printf 'images: %s\n' "$*" >&2; }

# shellcheck source=hack/apt-lib.sh
. "$root/hack/apt-lib.sh"

# The tool, built from its own module (hack/imagebuild/go.mod): the product's go.mod never sees
# go-containerregistry.
tool=$cache/imagebuild/imagebuild
build_tool() {
	mkdir -p "$(dirname "$tool")"
	(cd "$root/hack/imagebuild" && GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0 "$go" build -o "$tool" .)
}

# fetch_libc6 extracts Debian's libc6 package, at the version installed here (the glibc the cgo binaries
# are linked against), into .cache/libc6/verified/<version>_<arch>/root, once, after checking the .deb against
# Debian's signed package index (index: what listed it). The image's glibc comes from this package, never
# from the host's /lib.
libc6_dir=
fetch_libc6() {
	local version arch dir tmp
	version=$(dpkg-query -W -f='${Version}' libc6)
	arch=$(dpkg --print-architecture)
	dir=$cache/libc6/verified/${version}_$arch
	if [ ! -f "$dir/sha256" ]; then
		say "apt-get download libc6=$version"
		tmp=$(mktemp -d)
		chmod 0755 "$tmp"
		if ! (cd "$tmp" && apt-get download -q=2 -o APT::Sandbox::User=root "libc6:$arch=$version"); then
			apt_update
			(cd "$tmp" && apt-get download -q=2 -o APT::Sandbox::User=root "libc6:$arch=$version")
		fi
		# The .deb must be the one Debian's signed index lists: InRelease verified against Debian's
		# archive keys, the Packages file against InRelease, the .deb against Packages (imagebuild
		# verify-deb). Stale lists get one apt-get update.
		local deb proof
		deb=$(echo "$tmp"/libc6_*.deb)
		if ! proof=$("$tool" verify-deb --deb "$deb" --package libc6 --version "$version" --arch "$arch" --keyring "$DEBIAN_KEYRING"); then
			apt_update
			proof=$("$tool" verify-deb --deb "$deb" --package libc6 --version "$version" --arch "$arch" --keyring "$DEBIAN_KEYRING")
		fi
		say "verified $proof"
		rm -rf "$dir"
		mkdir -p "$dir"
		dpkg-deb -x "$deb" "$dir/root"
		printf '%s\n' "$version" >"$dir/version"
		printf '%s\n' "$proof" >"$dir/index"
		sha256sum "$deb" | cut -d' ' -f1 >"$dir/sha256"
		rm -rf "$tmp"
	fi
	libc6_dir=$dir
}

# build_binaries builds the binaries like `make build` does (static, but cgo for $CGO_BINARIES), and
# reproducibly: no VCS stamp (a dirty tree would change the bytes; the revision is an image label), no
# build ID (neither Go's nor the ELF NT_GNU_BUILD_ID note), paths trimmed, fixed cgo flags.
build_binaries() {
	local static=() cgo=() b
	for b in "$@"; do
		if [[ " $CGO_BINARIES " == *" $b "* ]]; then cgo+=("./cmd/$b"); else static+=("./cmd/$b"); fi
	done
	mkdir -p "$BIN_DIR"
	local flags=(-trimpath -buildvcs=false -ldflags "-s -w -buildid= -B none")
	export GOWORK=off GOFLAGS=-mod=readonly
	if [ "${#static[@]}" -gt 0 ]; then
		say "go build (static) ${static[*]}"
		CGO_ENABLED=0 "$go" build "${flags[@]}" -o "$BIN_DIR/" "${static[@]}"
	fi
	if [ "${#cgo[@]}" -gt 0 ]; then
		say "go build (cgo) ${cgo[*]}"
		CGO_ENABLED=1 CC=gcc CGO_CPPFLAGS= CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" CGO_CXXFLAGS="-O2 -g" CGO_LDFLAGS="-O2 -g" \
			"$go" build "${flags[@]}" -o "$BIN_DIR/" "${cgo[@]}"
	fi
}

cmd=${1:-build}
case "$cmd" in
build)
	build_tool
	if [ -n "${BINARIES:-}" ]; then
		read -r -a bins <<<"$BINARIES"
	else
		mapfile -t bins < <("$tool" list --root "$root")
	fi
	build_binaries "${bins[@]}"
	libc=()
	for b in "${bins[@]}"; do
		if [[ " $CGO_BINARIES " == *" $b "* ]]; then
			fetch_libc6
			libc=(--libc-root "$libc6_dir/root" --libc-version "$(cat "$libc6_dir/version")" --libc-sha256 "$(cat "$libc6_dir/sha256")")
			break
		fi
	done
	list=$(IFS=,; echo "${bins[*]}")
	"$tool" build --root "$root" --bin-dir "$BIN_DIR" --out "$OUT" --registry "$REGISTRY" --version "$VERSION" \
		--binaries "$list" --revision "${REVISION:-}" "${libc[@]}"
	;;
push)
	build_tool
	insecure=()
	if [ "$INSECURE" = 1 ]; then insecure=(--insecure); fi
	"$tool" push --from "$OUT" --registry "$REGISTRY" "${insecure[@]}"
	;;
deps)
	apt_install_missing docker-registry
	;;
libc6)
	build_tool
	fetch_libc6
	echo "$libc6_dir"
	;;
*)
	echo "usage: hack/images.sh [build|push|libc6|deps]" >&2
	exit 2
	;;
esac
