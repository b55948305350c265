#!/usr/bin/env bash
# Start (or reuse) the local Kafka broker and ClickHouse server, then print
# the environment the tests read. Safe to run repeatedly.
# Stdout carries only the KEY=VALUE lines: set -a; eval "$(deploy/local/up.sh)"; set +a
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

t0=$(date +%s%3N)
"$SCRIPT_DIR/kafka.sh" up
"$SCRIPT_DIR/clickhouse.sh" up
ms=$(($(date +%s%3N) - t0))
printf 'up: ready in %d.%ds\n' $((ms / 1000)) $((ms % 1000 / 100)) >&2

"$SCRIPT_DIR/kafka.sh" env
"$SCRIPT_DIR/clickhouse.sh" env
