// Package testenv gives integration tests the addresses of the real Kafka
// broker and ClickHouse server that `make test` starts (deploy/local).
//
// A missing address is a test failure, never a skip: in CI an absent broker
// must turn the run red.
//
// It also holds the broker fault rigs the tests share: a private real
// broker to freeze or kill (StartPrivateBroker), and kfake's frozen and
// refused produces (FreezeProduce, RefuseProduce, RefuseTxnOffsetCommit).
package testenv

import (
	"os"
	"testing"
)

// Default loopback addresses of deploy/local/up.sh.
const (
	DefaultKafka      = "127.0.0.1:19092"
	DefaultClickHouse = "127.0.0.1:19000"
)

// KafkaBrokers returns SLUICE_KAFKA_BROKERS or the deploy/local default.
func KafkaBrokers(t testing.TB) string {
	t.Helper()
	return env("SLUICE_KAFKA_BROKERS", DefaultKafka)
}

// ClickHouseAddr returns SLUICE_CLICKHOUSE_ADDR or the deploy/local default.
func ClickHouseAddr(t testing.TB) string {
	t.Helper()
	return env("SLUICE_CLICKHOUSE_ADDR", DefaultClickHouse)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
