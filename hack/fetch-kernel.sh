#!/usr/bin/env bash
# fetch-kernel.sh installs what test/realkernel needs: QEMU, a static busybox, and the Debian
# kernel (vmlinuz, an uncompressed vmlinux, and the few modules the guest loads) extracted under
# .cache/kernel (override with SANDBOX_GPU_KERNEL_DIR), plus the kernel's mtty sample mdev driver
# built for that kernel (hack/build-mtty.sh, into lib/modules/<version>/extra). Idempotent: it
# skips every step already done, and refreshes a cache extracted with another module list. Needs
# root (or sudo) for apt-get when packages are missing. Delete the kernel dir to refresh it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kdir=${SANDBOX_GPU_KERNEL_DIR:-$root/.cache/kernel}
debs=$root/.cache/debs

say() { printf 'fetch-kernel: %s\n' "$*"; }

# shellcheck source=hack/apt-lib.sh
. "$root/hack/apt-lib.sh"

# Module files the guest loads, under lib/modules/<version>/kernel (a folder ends in /): vfio and
# mdev, irqbypass, e1000e with its ptp/pps dependencies, and nvme (QEMU's SR-IOV controller) with
# t10-pi and the crc and crypto modules it needs.
modules=(drivers/vfio/ virt/lib/ drivers/net/ethernet/intel/e1000e/ drivers/ptp/ drivers/pps/
	drivers/nvme/host/ block/t10-pi.ko lib/crc64.ko lib/crc64-rocksoft.ko lib/crc-t10dif.ko
	crypto/crc64_rocksoft_generic.ko crypto/crct10dif_common.ko crypto/crct10dif_generic.ko)
kernel_contents="${modules[*]}"
contents="$kernel_contents extra/mtty.ko"

# fetch_kernel DIR downloads the current Debian kernel package and extracts into DIR its image,
# an uncompressed vmlinux, the module indexes and the modules above, and a static busybox.
fetch_kernel() {
	local dir=$1 meta image deb listing moddir m want
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
	want=("./boot/vmlinuz-$ver" "${moddir}modules.*")
	for m in "${modules[@]}"; do
		# A file pattern also matches the compressed module (m.xz, m.zst).
		if grep -q "^${moddir}kernel/$m" <<<"$listing"; then
			want+=("${moddir}kernel/$m*")
		else
			say "$deb has no kernel/$m (built in?)"
		fi
	done
	say "extracting $ver"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir" --wildcards "${want[@]}"
	if [ "$moddir" != "./lib/modules/$ver/" ]; then
		mkdir -p "$dir/lib/modules"
		mv "$dir/${moddir#./}" "$dir/lib/modules/$ver"
		rm -rf "$dir/usr"
	fi
	# busybox insmod loads only plain .ko files: unpack compressed modules (newer kernels ship .ko.xz).
	find "$dir/lib/modules" -name '*.ko.xz' -exec xz -d {} +
	if [ -n "$(find "$dir/lib/modules" -name '*.ko.zst' -print -quit)" ]; then
		find "$dir/lib/modules" -name '*.ko.zst' -exec zstd -q -d --rm {} +
	fi
	if extract_vmlinux "$dir/boot/vmlinuz-$ver" "$dir/boot/vmlinux-$ver"; then
		say "extracted boot/vmlinux-$ver"
	else
		say "could not extract vmlinux; the test boots vmlinuz instead"
	fi
	# Keep the static busybox (from busybox-static) next to the kernel: the initramfs needs nothing else.
	cp "$(command -v busybox || echo /bin/busybox)" "$dir/busybox"
	echo "$kernel_contents" >"$dir/.kernel-contents"
	cd "$root"
	rm -rf "$debs"
}

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

# 1. Host packages, only those missing.
apt_install_missing qemu-system-x86 busybox-static cpio kmod xz-utils

if [ -f "$kdir/.complete" ] && [ "$(cat "$kdir/.contents" 2>/dev/null || true)" = "$contents" ]; then
	say "kernel $(cat "$kdir/.complete") and mtty already in $kdir"
	exit 0
fi

# Everything is assembled in a temporary folder that replaces the cache at the end.
mkdir -p "$(dirname "$kdir")"
tmp=$(mktemp -d "$(dirname "$kdir")/kernel.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# 2. The kernel and its modules, kept when the cache already has this module list.
if [ -f "$kdir/.complete" ] && [ "$(cat "$kdir/.kernel-contents" 2>/dev/null || true)" = "$kernel_contents" ]; then
	ver=$(cat "$kdir/.complete")
	say "kernel $ver already in $kdir"
	cp -a "$kdir/." "$tmp/"
	rm -f "$tmp/.complete"
else
	fetch_kernel "$tmp"
fi

# 3. The mtty sample driver built for this kernel, then the module index over all of it.
if [ ! -f "$tmp/lib/modules/$ver/extra/mtty.ko" ]; then
	"$root/hack/build-mtty.sh" "$tmp" "$ver"
fi
depmod -b "$tmp" "$ver"

echo "$contents" >"$tmp/.contents"
echo "$ver" >"$tmp/.complete"
rm -rf "$kdir"
mv "$tmp" "$kdir"
trap - EXIT
say "done: $(du -sh "$kdir" | cut -f1) in $kdir"
