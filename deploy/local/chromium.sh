#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium for the report's HTML test
# (analytics/report: the HTML is rendered to a PNG and its charts checked)
# and the live view's browser test (dashboards/live, driven with chromedp).
# Idempotent; prints the browser's path on its last line.
set -euo pipefail

log() { printf 'chromium: %s\n' "$*" >&2; }
die() {
	printf 'chromium: ERROR: %s\n' "$*" >&2
	exit 1
}

find_browser() {
	local b
	for b in chromium chromium-browser; do
		if command -v "$b" >/dev/null 2>&1; then
			command -v "$b"
			return 0
		fi
	done
	return 1
}

as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root (or sudo) to run: $*"
	fi
}

if b=$(find_browser); then
	echo "$b"
	exit 0
fi
command -v apt-get >/dev/null 2>&1 || die "chromium is not installed and apt-get is not available"
aptlog="${TMPDIR:-/tmp}/sluice-chromium-apt.log"
t0=$(date +%s%3N)
log "installing chromium with apt-get"
if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >"$aptlog" 2>&1; then
	log "install failed; running apt-get update and retrying"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null || die "apt-get update failed"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >"$aptlog" 2>&1 || {
		tail -n 30 "$aptlog" >&2 || true
		die "apt-get install chromium failed"
	}
fi
ms=$(($(date +%s%3N) - t0))
log "installed in $((ms / 1000)).$((ms % 1000 / 100))s"
find_browser || die "chromium installed but not on PATH"
