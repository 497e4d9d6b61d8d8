#!/usr/bin/env bash
# build-mtty.sh KDIR VERSION builds the kernel's mtty sample (samples/vfio-mdev/mtty.c, a real mdev
# parent driver) out of tree for the Debian kernel VERSION (e.g. 6.1.0-57-amd64) and installs it as
# KDIR/lib/modules/VERSION/extra/mtty.ko. Debian ships mdev.ko but no sample driver, so it installs
# linux-headers-VERSION and linux-source-<major.minor> of the same package version, extracts that one
# file from the source tarball and builds it with a one-line Kbuild. Called by hack/fetch-kernel.sh,
# which caches the result; the caller runs depmod. Needs root (or sudo) for apt-get.
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 KDIR VERSION" >&2
	exit 2
fi
kdir=$1
ver=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

say() { printf 'build-mtty: %s\n' "$*"; }

# shellcheck source=hack/apt-lib.sh
. "$root/hack/apt-lib.sh"

# The headers carry the kernel's ABI in their name: they match the guest kernel exactly.
headers=linux-headers-$ver
apt_install_missing "$headers" make gcc
pkgver=$(dpkg-query -W -f='${Version}' "$headers")

# linux-source-6.1 for 6.1.0-57-amd64, at the headers' package version (the same build).
series=$(sed -E 's/^([0-9]+\.[0-9]+).*/\1/' <<<"$ver")
src=linux-source-$series
if [ "$(dpkg-query -W -f='${Version}' "$src" 2>/dev/null || true)" != "$pkgver" ]; then
	apt_update
	say "apt-get install $src=$pkgver"
	DEBIAN_FRONTEND=noninteractive "${sudo_[@]}" apt-get install -y -qq --no-install-recommends "$src=$pkgver" >/dev/null
fi
tarball=/usr/src/$src.tar.xz
if [ ! -f "$tarball" ]; then
	say "$src is installed but $tarball is missing" >&2
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say "extracting samples/vfio-mdev/mtty.c from $tarball"
# xz streams are not seekable: tar reads the whole tarball but writes only the one file.
tar -xJf "$tarball" -C "$work" --strip-components=3 "$src/samples/vfio-mdev/mtty.c"
echo 'obj-m := mtty.o' >"$work/Kbuild"
say "building mtty.ko for $ver"
make -s -C "/usr/src/$headers" M="$work" modules 2>&1 | grep -v 'Skipping BTF generation' || true
if [ ! -f "$work/mtty.ko" ]; then
	say "the build produced no mtty.ko" >&2
	exit 1
fi
if [ "$(modinfo -F vermagic "$work/mtty.ko" | cut -d' ' -f1)" != "$ver" ]; then
	say "mtty.ko vermagic $(modinfo -F vermagic "$work/mtty.ko") does not match $ver" >&2
	exit 1
fi
strip --strip-debug "$work/mtty.ko"
mkdir -p "$kdir/lib/modules/$ver/extra"
cp "$work/mtty.ko" "$kdir/lib/modules/$ver/extra/mtty.ko"
say "installed $kdir/lib/modules/$ver/extra/mtty.ko ($src $pkgver)"
