package loadtest

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestParseProcStat reads utime+stime after a command name that holds
// spaces and parentheses, and refuses lines it cannot read.
func TestParseProcStat(t *testing.T) {
	// Fields 3… of a real line: state ppid pgrp session tty tpgid flags
	// minflt cminflt majflt cmajflt utime stime …
	tail := " S 1 2 3 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0"
	for _, tc := range []struct {
		name, line string
		want       time.Duration
		err        string
	}{
		{"plain", "42 (sluice)" + tail, 3 * time.Second, ""},
		{"name with spaces and parens", "42 (a (b) c)" + tail, 3 * time.Second, ""},
		{"no command name", "42 sluice S 1", 0, "no command name"},
		{"short", "42 (sluice) S 1 2 3", 0, "fields after the command name"},
		{"bad utime", "42 (sluice) S 1 2 3 0 -1 4194560 100 0 0 0 x 50", 0, "utime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat([]byte(tc.line))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestProcCPUNamesProcess: a failed read names the process it was for,
// not always the gateway; this process's own line reads.
func TestProcCPUNamesProcess(t *testing.T) {
	if _, err := procCPU(os.Getpid(), "gateway"); err != nil {
		t.Fatalf("own /proc stat: %v", err)
	}
	_, err := procCPU(1<<30, "ledger-2") // above any pid_max
	if err == nil || !strings.Contains(err.Error(), "ledger-2 CPU time (pid 1073741824)") {
		t.Fatalf("err = %v, want it to name ledger-2 and its pid", err)
	}
}

// TestBrokerShareDroppedWhenUnread: a broker whose CPU time could not be
// read in either sample adds nothing and is reported as pid 0, instead of
// a difference against zero.
func TestBrokerShareDroppedWhenUnread(t *testing.T) {
	a := cpuSample{gateway: time.Second, broker: 0}
	b := cpuSample{gateway: 2 * time.Second, broker: 5 * time.Second, brokerOK: true}
	c := perRequest(a, b, 1000, time.Second, 0, 77)
	if c.BrokerMsPerReq != 0 || c.BrokerPID != 0 || c.GatewayMsPerReq != 1 {
		t.Fatalf("got broker %v ms/req pid %d, gateway %v ms/req; want 0, 0, 1", c.BrokerMsPerReq, c.BrokerPID, c.GatewayMsPerReq)
	}
	a.brokerOK, a.broker = true, time.Second
	if c := perRequest(a, b, 1000, time.Second, 0, 77); c.BrokerMsPerReq != 4 || c.BrokerPID != 77 {
		t.Fatalf("got broker %v ms/req pid %d; want 4, 77", c.BrokerMsPerReq, c.BrokerPID)
	}
}
