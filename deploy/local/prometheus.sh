#!/usr/bin/env bash
# Debian's prometheus package (2.42) for the alerting rules: promtool checks
# and unit-tests dashboards/alerts, and the integration test of the alerts
# (dashboards/alerts/alerts_integration_test.go) starts its own prometheus
# server from the same package on a loopback port. The system service is
# not used.
#
# Usage: deploy/local/prometheus.sh {install|test-rules|env}
#   install     install the package with apt-get if promtool or prometheus is missing
#   test-rules  install, then `promtool check rules` and `promtool test rules`
#               over dashboards/alerts
#   env         install, then print SLUICE_PROMETHEUS=… and SLUICE_PROMTOOL=…
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ALERTS_DIR=$(cd "$SCRIPT_DIR/../../dashboards/alerts" && pwd)

log() { printf 'prometheus: %s\n' "$*" >&2; }
die() {
	printf 'prometheus: ERROR: %s\n' "$*" >&2
	exit 1
}

# shellcheck source=deploy/local/lib.sh
source "$SCRIPT_DIR/lib.sh"

ensure_installed() {
	if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
		return 0
	fi
	# No recommends: the exporters and the web console are not needed.
	apt_install --no-recommends prometheus
	# The package starts its service where systemd runs; this project
	# starts its own servers.
	if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
		as_root systemctl disable --now prometheus >/dev/null 2>&1 || true
	fi
	log "installed $(prometheus --version 2>&1 | head -n1)"
}

case "${1:-}" in
install)
	ensure_installed
	;;
test-rules)
	ensure_installed
	cd "$ALERTS_DIR"
	promtool check rules ./*.rules.yml
	promtool test rules ./*.test.yml
	;;
env)
	ensure_installed
	echo "SLUICE_PROMETHEUS=$(command -v prometheus)"
	echo "SLUICE_PROMTOOL=$(command -v promtool)"
	;;
*)
	echo "usage: $0 {install|test-rules|env}" >&2
	exit 2
	;;
esac
