#!/usr/bin/env bash
# fetch-containerd.sh installs what test/containerd needs: runc and a static busybox (apt), containerd,
# its runc shim and ctr v2.4.2 (built from the Go module proxy into .cache/containerd/bin), and an OCI
# image-layout tarball of a busybox-only root filesystem (.cache/containerd/busybox-oci.tar), used as
# both the pause image and the workload image, since there is no registry to pull from.
# Idempotent: it skips every step already done (well under a second when everything is cached).
# Needs root (or sudo) for apt-get when packages are missing. The cold containerd build takes ~3.5 min.
# Override the folder with SANDBOX_GPU_CONTAINERD_DIR. The last line printed is the folder.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${SANDBOX_GPU_CONTAINERD_DIR:-$root/.cache/containerd}
version=v2.4.2
image_name=localhost/sandbox-gpu/busybox:test # keep equal to imageName in test/containerd

say() { printf 'fetch-containerd: %s\n' "$*" >&2; }

# shellcheck source=hack/apt-lib.sh
. "$root/hack/apt-lib.sh"

# 1. Host packages, only those missing.
apt_install_missing runc busybox-static

# 2. containerd, the runc shim and ctr, from the Go module proxy.
mkdir -p "$cache/bin"
bins=(containerd containerd-shim-runc-v2 ctr)
stamp=$cache/bin/.version
build=()
for b in "${bins[@]}"; do
	if [ ! -x "$cache/bin/$b" ] || [ "$(cat "$stamp" 2>/dev/null || true)" != "$version" ]; then
		build+=("github.com/containerd/containerd/v2/cmd/$b@$version")
	fi
done
if [ "${#build[@]}" -gt 0 ]; then
	go=${GO:-go}
	say "go install containerd $version (${#build[@]} commands; ~3.5 min cold)"
	start=$SECONDS
	# Outside any module or workspace: the commands' own go.mod decides their dependencies.
	(cd / && GOWORK=off GOFLAGS= GOBIN="$cache/bin" "$go" install "${build[@]}")
	echo "$version" >"$stamp"
	say "built in $((SECONDS - start)) s"
else
	say "containerd $version already in $cache/bin"
fi

# 3. The busybox image as an OCI image layout in a tarball, for ctr images import.
tarball=$cache/busybox-oci.tar
bb=$(command -v busybox || echo /bin/busybox)
if [ -f "$tarball" ] && [ "$(cat "$tarball.source" 2>/dev/null || true)" = "$(sha256sum <"$bb" | cut -d' ' -f1) $image_name" ]; then
	say "image $image_name already in $tarball"
	echo "$cache"
	exit 0
fi

case "$(uname -m)" in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) arch=$(uname -m) ;;
esac

tmp=$(mktemp -d "$cache/image.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rootfs=$tmp/rootfs
mkdir -p "$rootfs"/{bin,dev,etc,proc,sys,tmp,root}
cp "$bb" "$rootfs/bin/busybox"
# One symlink per applet, so the image has sh, ls, stat, env, sleep, cat, ...
for applet in $("$bb" --list); do
	[ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\n' >"$rootfs/etc/group"
chmod 1777 "$rootfs/tmp"

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }
blobs=$tmp/layout/blobs/sha256
mkdir -p "$blobs"

# An uncompressed layer: its digest is its diff ID. Reproducible: sorted, epoch mtimes, numeric root.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$tmp/layer.tar" .
layer=$(sha "$tmp/layer.tar")
layer_size=$(size "$tmp/layer.tar")
mv "$tmp/layer.tar" "$blobs/$layer"

cat >"$tmp/config.json" <<EOF
{"architecture":"$arch","os":"linux","config":{"Env":["PATH=/bin"],"Cmd":["/bin/sleep","2147483647"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$layer"]},"history":[{"created_by":"hack/fetch-containerd.sh: busybox-static"}]}
EOF
config=$(sha "$tmp/config.json")
config_size=$(size "$tmp/config.json")
mv "$tmp/config.json" "$blobs/$config"

cat >"$tmp/manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$config","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:$layer","size":$layer_size}]}
EOF
manifest=$(sha "$tmp/manifest.json")
manifest_size=$(size "$tmp/manifest.json")
mv "$tmp/manifest.json" "$blobs/$manifest"

cat >"$tmp/layout/index.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$manifest","size":$manifest_size,"platform":{"architecture":"$arch","os":"linux"},"annotations":{"io.containerd.image.name":"$image_name"}}]}
EOF
printf '{"imageLayoutVersion":"1.0.0"}\n' >"$tmp/layout/oci-layout"

tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$tmp/layout" -cf "$tmp/image.tar" oci-layout index.json blobs
mv "$tmp/image.tar" "$tarball"
echo "$(sha256sum <"$bb" | cut -d' ' -f1) $image_name" >"$tarball.source"
say "image $image_name ($arch, $(du -h "$tarball" | cut -f1)) in $tarball"
echo "$cache"
