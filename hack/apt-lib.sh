# apt-lib.sh: the Debian package steps the fetch scripts share. Sourced, not run; the caller
# defines `say`.

sudo_=()
if [ "$(id -u)" -ne 0 ]; then sudo_=(sudo); fi

apt_updated=0
# apt_update runs apt-get update once per script.
apt_update() {
	if [ "$apt_updated" -eq 0 ]; then
		say "apt-get update"
		"${sudo_[@]}" apt-get update -qq
		apt_updated=1
	fi
}

# apt_install_missing PKG... installs the packages that are not installed yet.
apt_install_missing() {
	local pkg missing=()
	for pkg in "$@"; do
		if [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" != "install ok installed" ]; then
			missing+=("$pkg")
		fi
	done
	if [ "${#missing[@]}" -gt 0 ]; then
		apt_update
		say "apt-get install ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive "${sudo_[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	else
		say "packages already installed"
	fi
}
