package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-cli")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestBadInputIsOneClearLine: a broken config, an unreachable Kafka and an
// unreachable ClickHouse each end with exactly one line on stderr that names
// the problem and the fix, no stack trace, and a non-zero exit.
func TestBadInputIsOneClearLine(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.yaml")
	if err := os.WriteFile(broken, []byte("providers:\n  - name: a\n    kind: openaii\nroutes: [{model: m, provider: b}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notYAML := filepath.Join(dir, "notyaml.yaml")
	if err := os.WriteFile(notYAML, []byte("providers: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want []string // substrings of the one line
		// problems: a config's problem list, a header line and then one
		// line each (want: substrings of the whole output).
		problems bool
	}{
		{"invalid config", []string{"gateway", "--config", broken, "--brokers", "127.0.0.1:1"}, []string{"broken.yaml", `"openaii"`, `unknown provider "b"`}, true},
		{"unparsable config", []string{"gateway", "--config", notYAML, "--brokers", "127.0.0.1:1"}, []string{"notyaml.yaml", "parse"}, true},
		{"missing config", []string{"gateway", "--config", filepath.Join(dir, "nope.yaml")}, []string{"nope.yaml", "no such file"}, false},
		{"unreachable kafka", []string{"topics", "ensure", "--brokers", "127.0.0.1:1"}, []string{"kafka at 127.0.0.1:1 unreachable", "make up"}, false},
		{"unreachable clickhouse", []string{"sink", "--brokers", "127.0.0.1:1", "--clickhouse", "127.0.0.1:1"}, []string{"127.0.0.1:1", "unreachable", "make up"}, false},
		{"unknown command", []string{"frobnicate"}, []string{"unknown command"}, false},
		{"view, unreachable kafka", []string{"view", "--brokers", "127.0.0.1:1"}, []string{"kafka at 127.0.0.1:1 unreachable", "make up"}, false},
		{"view, missing config", []string{"view", "--config", filepath.Join(dir, "nope.yaml")}, []string{"nope.yaml", "no such file"}, false},
		// Validated before connecting: the line names the flags, not Kafka.
		{"bad topic flags", []string{"topics", "ensure", "--brokers", "127.0.0.1:1", "--partitions", "-1", "--replication", "0"},
			[]string{"--partitions -1", "--replication 0"}, false},
		{"sim flag", []string{"sim", "--bogus"}, []string{"sluice sim: flag provided but not defined"}, false},
		{"whatif bad time", []string{"whatif", "--brokers", "127.0.0.1:1", "--from", "yesterday"}, []string{"--from", `"yesterday"`, "RFC 3339"}, false},
		{"whatif empty window", []string{"whatif", "--brokers", "127.0.0.1:1", "--from", "2026-12-01T10:00:00Z", "--to", "2026-12-01T09:00:00Z"}, []string{"--to", "is not after --from"}, false},
		{"whatif bad config", []string{"whatif", "--brokers", "127.0.0.1:1", "--ledger-config", broken}, []string{"--ledger-config", "broken.yaml"}, true},
		{"explain without id", []string{"explain", "--brokers", "127.0.0.1:1"}, []string{"usage: sluice explain"}, false},
		{"config unknown subcommand", []string{"config", "frob"}, []string{"usage: sluice config apply", "config history"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := exec.Command(bin, c.args...)
			cmd.Stderr = &stderr
			err := cmd.Run()
			if err == nil {
				t.Fatal("exit status 0")
			}
			out := strings.TrimRight(stderr.String(), "\n")
			first := strings.SplitN(out, "\n", 2)[0]
			if c.problems {
				// A config's problems: a header, then a line each, as
				// a compiler prints them (issue 21, item 4).
				first = out
			} else if c.name != "unknown command" && strings.Contains(out, "\n") {
				t.Errorf("more than one line:\n%s", out)
			}
			if strings.Contains(out, "goroutine ") || strings.Contains(out, "panic") {
				t.Errorf("stack trace:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(first, w) {
					t.Errorf("line %q does not mention %q", first, w)
				}
			}
			if strings.Contains(first, "unreachable") && c.name == "bad topic flags" {
				t.Errorf("connected before validating: %q", first)
			}
			if strings.Count(first, "sluice ") > 1 && !strings.Contains(first, "usage: sluice") {
				t.Errorf("prefix printed twice: %q", first)
			}
		})
	}
}

// TestHelpExitsZero: every command's help prints its usage and exits 0,
// the commands with subcommands included.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"bench", "--help"}, {"topics", "--help"}, {"keys", "--help"}, {"topics", "ensure", "--help"},
		{"dev", "--help"}, {"gateway", "--help"}, {"view", "--help"}, {"bench", "ledger", "-h"}, {"whatif", "-h"}, {"explain", "-h"}, {"config", "history", "-h"}} {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("sluice %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		if !strings.Contains(strings.ToLower(stderr.String()), "usage") {
			t.Errorf("sluice %s printed no usage:\n%s", strings.Join(args, " "), stderr.String())
		}
	}
}

// TestKafkaSecurityIsOneClearLine: a bad Kafka security setting, from a
// flag or the environment, ends in one line that lists the valid choices
// and never shows the password.
func TestKafkaSecurityIsOneClearLine(t *testing.T) {
	const pw = "s3cret-password-value"
	cases := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"bad mechanism flag", []string{"topics", "ensure", "--brokers", "127.0.0.1:1", "--kafka-sasl-mechanism", "GSSAPI", "--kafka-sasl-user", "u"},
			[]string{"SLUICE_KAFKA_SASL_PASSWORD=" + pw}, []string{`unknown mechanism "GSSAPI"`, "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"}},
		{"password without mechanism", []string{"replay", "--verify", "--brokers", "127.0.0.1:1"},
			[]string{"SLUICE_KAFKA_SASL_USER=u", "SLUICE_KAFKA_SASL_PASSWORD=" + pw}, []string{"no mechanism"}},
		{"bad tls boolean", []string{"ledger", "--brokers", "127.0.0.1:1", "--node", "n"},
			[]string{"SLUICE_KAFKA_TLS=maybe"}, []string{"SLUICE_KAFKA_TLS", "not a boolean"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cmd := exec.Command(bin, c.args...)
			cmd.Env = append(os.Environ(), c.env...)
			cmd.Stderr = &stderr
			if err := cmd.Run(); err == nil {
				t.Fatal("exit status 0")
			}
			out := strings.TrimRight(stderr.String(), "\n")
			if strings.Contains(out, "\n") || strings.Contains(out, pw) {
				t.Errorf("not one line, or shows the password:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("%q does not mention %q", out, w)
				}
			}
		})
	}
}
