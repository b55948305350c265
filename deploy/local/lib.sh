# Shared by the deploy/local scripts; sourced, never run. The caller defines
# log and die (each script prefixes its own messages).

# as_root runs a command as root: directly, or through sudo.
as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root (or sudo) to run: $*"
	fi
}

# apt_install [--no-recommends] PKG... installs Debian packages. A fresh machine's
# package lists may be stale or missing, so a failed install runs
# `apt-get update` once and tries again; a second failure prints the tail of
# the log and dies. In containers policy-rc.d (and no systemd) keeps package
# services from starting; these scripts start their own servers anyway.
apt_install() {
	local opts=()
	if [[ ${1:-} == --no-recommends ]]; then
		opts=(--no-install-recommends)
		shift
	fi
	command -v apt-get >/dev/null 2>&1 || die "cannot install $*: apt-get is not available"
	local aptlog="${TMPDIR:-/tmp}/sluice-apt-$1.log"
	log "installing $* with apt-get"
	if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${opts[@]}" "$@" >"$aptlog" 2>&1; then
		log "install failed; running apt-get update and retrying"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null || die "apt-get update failed"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${opts[@]}" "$@" >"$aptlog" 2>&1 || {
			tail -n 30 "$aptlog" >&2 || true
			die "apt-get install $* failed"
		}
	fi
}
