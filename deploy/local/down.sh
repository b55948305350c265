#!/usr/bin/env bash
# Stop the local Kafka broker and ClickHouse server started by up.sh.
# Data is kept; to reset, remove the state dir afterwards (see README).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

rc=0
"$SCRIPT_DIR/kafka.sh" down || rc=1
"$SCRIPT_DIR/clickhouse.sh" down || rc=1
exit "$rc"
