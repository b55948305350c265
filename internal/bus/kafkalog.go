package bus

import (
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaLogEnv names the environment variable that turns on franz-go's own
// log on every client Opts builds: debug, info, warn or error, written to
// stderr. It is an operator aid: franz-go decides some outcomes silently
// (GroupTransactSession.End aborts without an error when the offset commit
// or a heartbeat is refused), and its log says why.
const KafkaLogEnv = "SLUICE_KAFKA_LOG"

// kafkaLogOpts returns the logger option KafkaLogEnv asks for, if any.
func kafkaLogOpts() []kgo.Opt {
	level, ok := parseLogLevel(os.Getenv(KafkaLogEnv))
	if !ok {
		return nil
	}
	// Each line carries its UTC time: without it the log cannot be laid
	// beside the ledger's own lines or the broker's (issue 19's restart
	// timeline).
	stamp := func() string { return time.Now().UTC().Format("15:04:05.000 ") }
	return []kgo.Opt{kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, stamp))}
}

// parseLogLevel maps a KafkaLogEnv value to a franz-go level; "" and
// unknown values mean no log.
func parseLogLevel(s string) (kgo.LogLevel, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return kgo.LogLevelDebug, true
	case "info":
		return kgo.LogLevelInfo, true
	case "warn":
		return kgo.LogLevelWarn, true
	case "error":
		return kgo.LogLevelError, true
	}
	return kgo.LogLevelNone, false
}
