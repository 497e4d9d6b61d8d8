# Scenario of a node whose kernel has not loaded vfio, with no modprobe, insmod or any other module
# tool on PATH (as in the shipped images): one edu (1234:11e8) behind its own root port. init
# loaded no module; vfio-manager must load vfio_pci and what it needs from /lib/modules/<release>
# itself. Sourced by init.sh.
rm -f /bin/modprobe /bin/insmod /bin/rmmod /bin/lsmod /bin/depmod /bin/modinfo
# Files only: busybox sh finds its own applets without them, but vfio-manager, a Go binary, could
# only exec a file on PATH.
tools=""
for d in $(echo "$PATH" | tr ':' ' ') /sbin /usr/sbin; do
	for x in modprobe insmod; do
		if [ -e "$d/$x" ]; then tools="$tools $d/$x"; fi
	done
done
var MODPROBE "${tools:-none}"
var BEFORE "$(cut -d ' ' -f 1 /proc/modules | tr '\n' ',')"
var FILES "$(find /lib/modules -name 'vfio-pci.ko*' | tr '\n' ',')"

step edu-bind /vfio-manager bind --vendor 1234 --all --output json
var AFTER "$(cut -d ' ' -f 1 /proc/modules | tr '\n' ',')"
var INITSTATE "$(cat /sys/module/vfio_pci/initstate 2>/dev/null || echo absent)"
step edu-unbind /vfio-manager unbind --vendor 1234 --all --output json
# Loaded now: a second bind loads nothing and binds again.
step edu-rebind /vfio-manager bind --vendor 1234 --all --output json
