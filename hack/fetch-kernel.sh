#!/usr/bin/env bash
# fetch-kernel.sh installs what test/realkernel needs: QEMU, a static busybox, and the Debian
# kernel (vmlinuz, an uncompressed vmlinux, and the few modules the guest loads) extracted under
# .cache/kernel (override with SANDBOX_GPU_KERNEL_DIR). Idempotent: it skips every step already done.
# Needs root (or sudo) for apt-get when packages are missing. Delete the kernel dir to refresh it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kdir=${SANDBOX_GPU_KERNEL_DIR:-$root/.cache/kernel}
debs=$root/.cache/debs

say() { printf 'fetch-kernel: %s\n' "$*"; }

# shellcheck source=hack/apt-lib.sh
. "$root/hack/apt-lib.sh"

# 1. Host packages, only those missing.
apt_install_missing qemu-system-x86 busybox-static cpio kmod xz-utils

# 2. The kernel and its modules.
if [ -f "$kdir/.complete" ]; then
	say "kernel $(cat "$kdir/.complete") already in $kdir"
	exit 0
fi

mkdir -p "$debs"
cd "$debs"
apt_update
say "apt-get download linux-image-amd64"
rm -f linux-image-*.deb
apt-get download -qq linux-image-amd64 2>&1 | grep -v 'unsandboxed' || true
meta=$(ls linux-image-amd64_*.deb)
# The metapackage depends on exactly one versioned image, e.g. linux-image-6.1.0-57-amd64.
image=$(dpkg-deb -f "$meta" Depends | grep -o 'linux-image-[0-9][^ (,]*' | sed -n 1p || true)
if [ -z "$image" ]; then
	say "cannot find the versioned image in the Depends of $meta" >&2
	exit 1
fi
say "apt-get download $image"
apt-get download -qq "$image" 2>&1 | grep -v 'unsandboxed' || true
deb=$(ls "${image}"_*.deb)
ver=${image#linux-image-}

# Paths inside the package: lib/modules (bookworm) or usr/lib/modules (merged /usr).
listing=$(dpkg-deb --fsys-tarfile "$deb" | tar -t)
moddir=$(grep -o "^\./\(usr/\)\?lib/modules/$ver/" <<<"$listing" | sed -n 1p || true)
if [ -z "$moddir" ]; then
	say "no modules directory for $ver in $deb" >&2
	exit 1
fi
# Module folders the guest needs: vfio, irqbypass, e1000e and its ptp/pps dependencies.
want=("./boot/vmlinuz-$ver" "${moddir}modules.*")
for sub in drivers/vfio virt/lib drivers/net/ethernet/intel/e1000e drivers/ptp drivers/pps; do
	if grep -q "^${moddir}kernel/$sub/" <<<"$listing"; then
		want+=("${moddir}kernel/$sub/*")
	fi
done

mkdir -p "$(dirname "$kdir")"
tmp=$(mktemp -d "$(dirname "$kdir")/kernel.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
say "extracting $ver into $kdir"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" --wildcards "${want[@]}"
if [ "$moddir" != "./lib/modules/$ver/" ]; then
	mkdir -p "$tmp/lib/modules"
	mv "$tmp/${moddir#./}" "$tmp/lib/modules/$ver"
	rm -rf "$tmp/usr"
fi
# busybox insmod loads only plain .ko files: unpack compressed modules (newer kernels ship .ko.xz).
find "$tmp/lib/modules" -name '*.ko.xz' -exec xz -d {} +
if [ -n "$(find "$tmp/lib/modules" -name '*.ko.zst' -print -quit)" ]; then
	find "$tmp/lib/modules" -name '*.ko.zst' -exec zstd -q -d --rm {} +
fi
depmod -b "$tmp" "$ver"

# The uncompressed ELF vmlinux boots faster under TCG (PVH entry, no decompression): find the
# compressed payload inside the bzImage and unpack it, as the kernel's scripts/extract-vmlinux does.
extract_vmlinux() {
	local img=$1 out=$2 magic tool pos
	for spec in 'xz -dc|\xfd7zXZ\x00' 'zstd -dc|\x28\xb5\x2f\xfd' 'gzip -dc|\x1f\x8b\x08'; do
		tool=${spec%%|*}
		magic=${spec#*|}
		command -v "${tool%% *}" >/dev/null || continue
		for pos in $(LC_ALL=C grep -obUaP "$magic" "$img" | cut -d: -f1); do
			tail -c "+$((pos + 1))" "$img" | $tool >"$out" 2>/dev/null || true
			if [ "$(head -c4 "$out" | od -An -tx1 | tr -d ' ')" = "7f454c46" ]; then
				return 0
			fi
		done
	done
	rm -f "$out"
	return 1
}
if extract_vmlinux "$tmp/boot/vmlinuz-$ver" "$tmp/boot/vmlinux-$ver"; then
	say "extracted boot/vmlinux-$ver"
else
	say "could not extract vmlinux; the test boots vmlinuz instead"
fi

# Keep the static busybox (from busybox-static) next to the kernel: the initramfs needs nothing else.
bb=$(command -v busybox || echo /bin/busybox)
cp "$bb" "$tmp/busybox"

echo "$ver" >"$tmp/.complete"
rm -rf "$debs"
rm -rf "$kdir"
mv "$tmp" "$kdir"
trap - EXIT
say "done: $(du -sh "$kdir" | cut -f1) in $kdir"
