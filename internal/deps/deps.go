//go:build tools

// Package deps pins the project's chosen libraries so that every helper
// builds against the same versions.
package deps

import (
	_ "github.com/ClickHouse/clickhouse-go/v2"
	_ "github.com/google/uuid"
	_ "github.com/gorilla/websocket"
	_ "github.com/pkoukk/tiktoken-go"
	_ "github.com/pkoukk/tiktoken-go-loader"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
	_ "gopkg.in/yaml.v3"
)
