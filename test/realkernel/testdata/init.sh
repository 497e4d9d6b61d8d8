#!/bin/busybox sh
# PID 1 of the test guests (see realkernel_test.go). It loads the modules, sources
# /scenario.sh, prints the kernel log and powers off. The host parses only lines holding an
# @@ marker; the kernel log is kept off the console while the scenario runs, so that it cannot
# split a marker line, and is printed at the end as @@K lines.
/bin/busybox mount -t proc proc /proc
/bin/busybox --install -s /bin
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do
	insmod "$m" || echo "@@INSMOD_FAIL ${m##*/}"
done </etc/modules.load
echo 1 >/proc/sys/kernel/printk
echo "@@BOOT"

# pci_find VENDOR DEVICE prints the addresses of the PCI functions with these ids.
pci_find() {
	for d in /sys/bus/pci/devices/*; do
		if [ "$(cat "$d/vendor")" = "0x$1" ] && [ "$(cat "$d/device")" = "0x$2" ]; then
			echo "${d##*/}"
		fi
	done
}

# link_name prints the last element of a symlink's target, or nothing when it is absent.
link_name() {
	if [ -e "$1" ]; then basename "$(readlink "$1")"; fi
}

# var NAME VALUE tells the host a value found in the guest.
var() {
	echo "@@VAR $1 $2"
}

# hold_group ADDRESS holds the PCI function's /dev/vfio/<group> open in a background process
# (HOLDER) and tells the host HELD: "held" once the group is open. If the open fails the holder
# exits and HELD is empty. release_group ends the holder.
hold_group() {
	mkfifo /tmp/held
	sh -c 'echo held; exec sleep 1000' >/tmp/held 3<"/dev/vfio/$(link_name "/sys/bus/pci/devices/$1/iommu_group")" &
	HOLDER=$!
	read -r HELD </tmp/held
	var HELD "$HELD"
}

release_group() {
	kill "$HOLDER"
	wait "$HOLDER"
}

# state prints each PCI function's ids, driver, IOMMU group and interfaces, and /dev/vfio.
state() {
	for d in /sys/bus/pci/devices/*; do
		echo "@@DEV ${d##*/} $(cat "$d/vendor") $(cat "$d/device") $(cat "$d/class")" \
			"drv=$(link_name "$d/driver") group=$(link_name "$d/iommu_group")" \
			"net=$(ls "$d/net" 2>/dev/null | tr '\n' ',')"
	done
	echo "@@VFIO $(ls /dev/vfio 2>/dev/null | tr '\n' ' ')"
}

# prefixed MARK FILE prints each line of FILE after MARK, the last one even without a newline.
prefixed() {
	while IFS= read -r l || [ -n "$l" ]; do
		echo "$1 $l"
	done <"$2"
}

# step NAME CMD... runs CMD, then prints its output, its exit status and the state after it.
step() {
	name=$1
	shift
	echo "@@STEP $name"
	echo "@@CMD $*"
	"$@" >/tmp/out 2>/tmp/err
	rc=$?
	prefixed @@O /tmp/out
	prefixed @@E /tmp/err
	echo "@@RC $rc"
	state
	echo "@@END"
}

. /scenario.sh

echo "@@DONE"
dmesg >/tmp/dmesg
prefixed @@K /tmp/dmesg
poweroff -f
