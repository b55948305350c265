package bus

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestParseLogLevel(t *testing.T) {
	for _, tc := range []struct {
		in    string
		level kgo.LogLevel
		ok    bool
	}{
		{"", kgo.LogLevelNone, false},
		{"debug", kgo.LogLevelDebug, true},
		{" INFO ", kgo.LogLevelInfo, true},
		{"warn", kgo.LogLevelWarn, true},
		{"error", kgo.LogLevelError, true},
		{"verbose", kgo.LogLevelNone, false},
	} {
		level, ok := parseLogLevel(tc.in)
		if level != tc.level || ok != tc.ok {
			t.Errorf("parseLogLevel(%q) = %v, %v; want %v, %v", tc.in, level, ok, tc.level, tc.ok)
		}
	}
}
