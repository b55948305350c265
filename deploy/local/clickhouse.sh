#!/usr/bin/env bash
# Local ClickHouse server for development and integration tests: Debian's
# clickhouse-server package (18.16), run as the current user from a
# project-owned config on loopback ports. The system service is not used.
#
# Usage: deploy/local/clickhouse.sh {up|down|restart|status|env}
#
# Environment:
#   SLUICE_STATE                    runtime state (default $HOME/.cache/sluice/state)
#   SLUICE_CLICKHOUSE_PORT          native TCP port (default 19000)
#   SLUICE_CLICKHOUSE_HTTP_PORT     HTTP port (default 18123)
#   SLUICE_CLICKHOUSE_START_TIMEOUT seconds to wait for the server (default 60)
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TEMPLATE_DIR="$SCRIPT_DIR/clickhouse"

STATE_ROOT=${SLUICE_STATE:-$HOME/.cache/sluice/state}
HOST=127.0.0.1
TCP_PORT=${SLUICE_CLICKHOUSE_PORT:-19000}
HTTP_PORT=${SLUICE_CLICKHOUSE_HTTP_PORT:-18123}
START_TIMEOUT=${SLUICE_CLICKHOUSE_START_TIMEOUT:-60}

STATE_DIR="$STATE_ROOT/clickhouse"
CONF_DIR="$STATE_DIR/config"
DATA_DIR="$STATE_DIR/data"
TMP_DIR="$STATE_DIR/tmp"
USER_FILES_DIR="$STATE_DIR/user_files"
FORMAT_SCHEMA_DIR="$STATE_DIR/format_schemas"
LOG_DIR="$STATE_DIR/logs"
PID_FILE="$STATE_DIR/clickhouse.pid"
CONFIG="$CONF_DIR/config.xml"
STDOUT_LOG="$LOG_DIR/stdout.log"
ERROR_LOG="$LOG_DIR/clickhouse-server.err.log"

log() { printf 'clickhouse: %s\n' "$*" >&2; }
die() {
	printf 'clickhouse: ERROR: %s\n' "$*" >&2
	exit 1
}

now_ms() { date +%s%3N; }
elapsed() { # elapsed START_MS -> seconds with one decimal
	local ms=$(($(now_ms) - $1))
	printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

# shellcheck source=deploy/local/lib.sh
source "$SCRIPT_DIR/lib.sh"

ensure_installed() {
	if command -v clickhouse-server >/dev/null 2>&1 && command -v clickhouse-client >/dev/null 2>&1; then
		return 0
	fi
	local t0
	t0=$(now_ms)
	apt_install clickhouse-server clickhouse-client
	log "installed in $(elapsed "$t0")s"
}

render_config() {
	mkdir -p "$CONF_DIR" "$DATA_DIR" "$TMP_DIR" "$USER_FILES_DIR" "$FORMAT_SCHEMA_DIR" "$LOG_DIR"
	local f
	for f in config.xml users.xml; do
		sed -e "s|@LOG_DIR@|$LOG_DIR|g" \
			-e "s|@DATA_DIR@|$DATA_DIR|g" \
			-e "s|@TMP_DIR@|$TMP_DIR|g" \
			-e "s|@USER_FILES_DIR@|$USER_FILES_DIR|g" \
			-e "s|@FORMAT_SCHEMA_DIR@|$FORMAT_SCHEMA_DIR|g" \
			-e "s|@CONF_DIR@|$CONF_DIR|g" \
			-e "s|@TCP_PORT@|$TCP_PORT|g" \
			-e "s|@HTTP_PORT@|$HTTP_PORT|g" \
			"$TEMPLATE_DIR/$f" >"$CONF_DIR/$f"
	done
}

# Prints the pid from the pid file if that process is alive and is our server.
running_pid() {
	[[ -f $PID_FILE ]] || return 1
	local pid
	pid=$(<"$PID_FILE")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	# Guard against pid reuse: the process must be clickhouse-server on our config.
	if [[ -r /proc/$pid/cmdline ]] && ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CONFIG"; then
		return 1
	fi
	printf '%s\n' "$pid"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

server_answers() {
	timeout 10 clickhouse-client --host "$HOST" --port "$TCP_PORT" -q 'SELECT 1' >/dev/null 2>&1
}

show_logs() {
	local f
	for f in "$STDOUT_LOG" "$ERROR_LOG"; do
		if [[ -s $f ]]; then
			echo "---- last 30 lines of $f" >&2
			tail -n 30 "$f" >&2
		fi
	done
}

stop_pid() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 60; i++)); do # up to 30s
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.5
	done
	log "server $pid did not stop after SIGTERM; sending SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 20; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.5
	done
}

cmd_up() {
	ensure_installed
	local pid
	if pid=$(running_pid); then
		if server_answers; then
			log "reusing running server (pid $pid) on $HOST:$TCP_PORT"
			return 0
		fi
		die "server process $pid is alive but $HOST:$TCP_PORT does not answer; run '$0 restart' or '$0 down'"
	fi
	rm -f "$PID_FILE"
	local p
	for p in "$TCP_PORT" "$HTTP_PORT"; do
		if port_open "$p"; then
			die "port $HOST:$p is already in use by a process this script did not start"
		fi
	done

	render_config
	if [[ -f $STDOUT_LOG ]]; then
		mv -f "$STDOUT_LOG" "$STDOUT_LOG.1"
	fi

	local t0
	t0=$(now_ms)
	# Run from the state dir (the server resolves some relative paths against
	# its working directory); setsid so it outlives the calling shell/job.
	(cd "$STATE_DIR" && exec setsid nohup clickhouse-server --config-file="$CONFIG" \
		>>"$STDOUT_LOG" 2>&1 </dev/null) &
	pid=$!
	printf '%s\n' "$pid" >"$PID_FILE"

	local deadline=$((SECONDS + START_TIMEOUT))
	until server_answers; do
		if ! kill -0 "$pid" 2>/dev/null; then
			rm -f "$PID_FILE"
			show_logs
			die "server exited during start-up (logs: $LOG_DIR)"
		fi
		if ((SECONDS >= deadline)); then
			show_logs
			stop_pid "$pid"
			rm -f "$PID_FILE"
			die "server did not answer on $HOST:$TCP_PORT within ${START_TIMEOUT}s (logs: $LOG_DIR)"
		fi
		sleep 0.3
	done
	log "server up (pid $pid) on $HOST:$TCP_PORT (http $HTTP_PORT): started in $(elapsed "$t0")s"
}

cmd_down() {
	local pid
	if pid=$(running_pid); then
		local t0
		t0=$(now_ms)
		stop_pid "$pid"
		log "server (pid $pid) stopped in $(elapsed "$t0")s"
	else
		log "server not running"
	fi
	rm -f "$PID_FILE"
}

cmd_status() {
	local pid
	if pid=$(running_pid); then
		if server_answers; then
			echo "clickhouse: running (pid $pid) on $HOST:$TCP_PORT (http $HTTP_PORT), state $STATE_DIR"
			return 0
		fi
		echo "clickhouse: process $pid alive but $HOST:$TCP_PORT not answering"
		return 1
	fi
	echo "clickhouse: stopped"
	return 1
}

cmd_env() { echo "SLUICE_CLICKHOUSE_ADDR=$HOST:$TCP_PORT"; }

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
restart)
	cmd_down
	cmd_up
	;;
status) cmd_status ;;
env) cmd_env ;;
*)
	echo "usage: $0 {up|down|restart|status|env}" >&2
	exit 2
	;;
esac
