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

# shellcheck source=deploy/local/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if b=$(find_browser); then
	echo "$b"
	exit 0
fi
t0=$(date +%s%3N)
apt_install --no-recommends chromium fonts-dejavu-core
ms=$(($(date +%s%3N) - t0))
log "installed in $((ms / 1000)).$((ms % 1000 / 100))s"
find_browser || die "chromium installed but not on PATH"
