// Command sluice is the single binary of Sluice: every service and tool is
// a subcommand (`sluice help` lists them).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluice-dev/sluice/internal/problems"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"dev", "run the whole stack in one process (embedded Kafka, simulator, ledger, gateway)", runDev},
		{"gateway", "run the gateway (admission node) against a Kafka cluster", runGateway},
		{"ledger", "run a ledger member (single writer per sluice.requests partition)", runLedger},
		{"sink", "copy every Sluice event into ClickHouse", runSink},
		{"view", "serve the live quota view against a Kafka cluster: `sluice view --brokers ADDR [--listen ADDR] [--config FILE]`", runView},
		{"topics", "manage Kafka topics: `sluice topics ensure`", runTopics},
		{"sim", "run the provider simulator", runSim},
		{"loadtest", "run a load scenario against a gateway, the embedded stack or the bare simulator", runLoadtest},
		{"admin", "admin API client: `sluice admin [--reason R] METHOD PATH [JSON]` (docs/admin-api.md)", runAdmin},
		{"keys", "API key helpers: `sluice keys hash KEY`, `sluice keys new`", runKeys},
		{"estimate", "print the pre-flight token estimate of the request on stdin as JSON", runEstimate},
		{"report", "the weekly calibration report from ClickHouse: `sluice report --format md|html|json`", runReport},
		{"config", "install a calibration patch (`sluice config apply [--actor A] [--reason R] [--yes] PATCH`) or list changes (`sluice config history`)", runConfig},
		{"replay", "re-run the ledger over the recorded log: `sluice replay --verify`", runReplay},
		{"explain", "explain one decision: the request's timeline, buckets, queue and feedback: `sluice explain REQUEST_ID`", runExplain},
		{"usage", "a key's own limits and what is left, with units: `sluice usage` (OPENAI_BASE_URL, OPENAI_API_KEY)", runUsage},
		{"whatif", "replay recorded demand under a new ledger config, side by side with what happened", runWhatIf},
		{"bench", "benchmarks that print JSON: `sluice bench ledger|ledger-kafka|hot|gateway|codec|sink|report`", runBench},
		{"version", "print the version", func(context.Context, []string) error { fmt.Println(version); return nil }},
	}
}

var version = "0.1.0-dev"

func usage() {
	fmt.Fprintf(os.Stderr, "sluice — an event-sourced quota governor for LLM APIs\n\nusage: sluice <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(os.Stderr, "\n`sluice <command> -h` shows a command's flags.\n")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, c := range commands {
		if c.name == os.Args[1] {
			err := c.run(ctx, os.Args[2:])
			if err == nil || errors.Is(err, flag.ErrHelp) {
				return
			}
			// One clear line, no stack trace.
			// Commands that run as their own CLI (sim, loadtest) prefix
			// their errors already: print the prefix once.
			msg := err.Error()
			for _, p := range []string{"sluice " + c.name + ": ", c.name + ": "} {
				msg = strings.TrimPrefix(msg, p)
			}
			// A config's problems print as a compiler's do: a header
			// line, then one file:line:col: path: message line each.
			// Anything else is one clear line.
			var pl *problems.List
			if !errors.As(err, &pl) {
				msg = oneLine(msg)
			}
			fmt.Fprintf(os.Stderr, "sluice %s: %s\n", c.name, msg)
			os.Exit(1)
		}
	}
	fmt.Fprintf(os.Stderr, "sluice: unknown command %q\n\n", os.Args[1])
	usage()
	os.Exit(2)
}

// envOr returns the environment variable name, or def.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// oneLine folds a multi-line error (a validation list, a YAML error) into
// one line, so that the failure is a single greppable line.
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// helpAsked reports whether args ask for a command's help (-h, --help,
// help) before any subcommand: the command prints its usage and exits 0.
func helpAsked(args []string) bool {
	return len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help")
}

// usageHelp prints usage to stderr and returns flag.ErrHelp (exit 0).
func usageHelp(usage string) error {
	fmt.Fprintln(os.Stderr, usage)
	return flag.ErrHelp
}
