package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

const whatIfUsage = "usage: sluice whatif [--ledger-config NEW.json] [--from T1] [--to T2] [--partitions 0,1] [--json]"

// runWhatIf implements `sluice whatif`: the recorded demand replayed under
// a new ledger config, side by side with what happened.
func runWhatIf(ctx context.Context, args []string) error {
	fs := newFlags("whatif")
	brokers := brokersFlag(fs)
	prefix := prefixFlag(fs)
	cfgPath := fs.String("ledger-config", "", "the new ledger configuration (JSON); default: the recorded ones (reproduces what happened)")
	from := fs.String("from", "", "window start: RFC 3339, unix ms, or a duration before now (24h); default: the log start")
	to := fs.String("to", "", "window end (exclusive), same forms; default: now")
	parts := fs.String("partitions", "", "comma-separated partitions (default: all)")
	group := ledgerGroupFlag(fs, "the ledger's consumer group: only inputs it has committed are replayed")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	quiet := fs.Bool("q", false, "no progress bar on stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected argument %q; %s", fs.Arg(0), whatIfUsage)
	}
	now := time.Now()
	o := ledgerd.WhatIfOptions{Brokers: bus.SplitBrokers(*brokers), Topics: bus.NamesWithPrefix(*prefix), Group: *group}
	var err error
	if o.FromMs, err = parseWhen(*from, now); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	if o.ToMs, err = parseWhen(*to, now); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	if o.ToMs != 0 && o.ToMs <= o.FromMs {
		return fmt.Errorf("--to %s is not after --from %s", *to, *from)
	}
	if o.Partitions, err = parsePartitions(*parts); err != nil {
		return err
	}
	if *cfgPath != "" {
		b, err := os.ReadFile(*cfgPath)
		if err != nil {
			return fmt.Errorf("--ledger-config: %w", err)
		}
		if _, err := ledger.ParseConfig(b); err != nil {
			return fmt.Errorf("--ledger-config %s: %w", *cfgPath, err)
		}
		o.Ledger = b
	}
	if !*quiet {
		o.Progress = progressBar(os.Stderr, "whatif")
	}
	rep, err := ledgerd.WhatIf(ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printWhatIf(os.Stdout, rep)
	return nil
}

// parseWhen reads a time flag: empty (0), unix milliseconds, RFC 3339, or
// a duration meaning that long before now.
func parseWhen(s string, now time.Time) (int64, error) {
	if s == "" {
		return 0, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UnixMilli(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d).UnixMilli(), nil
	}
	return 0, fmt.Errorf("%q is neither unix ms, RFC 3339 nor a duration before now (24h)", s)
}

func parsePartitions(s string) ([]int32, error) {
	var out []int32
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := strconv.ParseInt(f, 10, 32)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("--partitions: %q is not a partition number", f)
		}
		out = append(out, int32(p))
	}
	return out, nil
}

// progressBar returns a progress callback drawing a bar on w (a line
// rewritten in place; the last call ends it).
func progressBar(w io.Writer, what string) func(done, total int64) {
	start := time.Now()
	return func(done, total int64) {
		const width = 30
		frac := 1.0
		if total > 0 {
			frac = min(1, float64(done)/float64(total))
		}
		n := int(frac * width)
		rate := float64(done) / max(time.Since(start).Seconds(), 1e-3)
		fmt.Fprintf(w, "\r%s [%s%s] %3.0f%% %d/%d events %.0f/s", what, strings.Repeat("#", n), strings.Repeat(".", width-n), frac*100, done, total, rate)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}

// printWhatIf renders the report as tables: recorded and what-if side by
// side.
func printWhatIf(w io.Writer, rep *ledgerd.WhatIfReport) {
	r, n := &rep.Recorded, &rep.WhatIf
	fmt.Fprintf(w, "what-if over %s – %s: %d partitions, %d inputs replayed (%.0f events/s)\n\n",
		msTime(rep.FromMs), msTime(rep.ToMs), rep.Partitions, rep.Inputs, rep.EventsPerSec)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, a, b any) { fmt.Fprintf(tw, "%s\t%v\t%v\t\n", name, a, b) }
	fmt.Fprintf(tw, "\trecorded\twhat-if\t\n")
	row("decisions", r.Decisions, n.Decisions)
	row("grants", r.Grants, n.Grants)
	row("queued", r.Queued, n.Queued)
	row("denied", r.Denied, n.Denied)
	for _, reason := range unionKeys(r.Denials, n.Denials) {
		row("  "+string(reason), r.Denials[reason], n.Denials[reason])
	}
	for _, c := range unionKeys(r.Waits, n.Waits) {
		row("wait p50/p99 ms "+c, fmt.Sprintf("%d/%d", r.Waits[c].P50Ms, r.Waits[c].P99Ms), fmt.Sprintf("%d/%d", n.Waits[c].P50Ms, n.Waits[c].P99Ms))
	}
	for _, t := range unionKeys(r.Tenants, n.Tenants) {
		row("share "+t, pct(r.Tenants[t].Share), pct(n.Tenants[t].Share))
	}
	row("Jain's index (served)", fmt.Sprintf("%.3f", r.Jain), fmt.Sprintf("%.3f", n.Jain))
	row("provider 429s recorded", r.ProviderRateLimited, "")
	row("provider limits exceeded (predicted)", "", fmt.Sprintf("%d (%s of grants)", n.PredictedProviderExceeded, pct(ratio(n.PredictedProviderExceeded, n.Grants))))
	for _, b := range rep.Budgets {
		row("budget "+b.ID+" limit ("+b.Unit+")", "", b.Limit)
		row("budget "+b.ID+" spent", b.RecordedSpent, b.WhatIfSpent)
	}
	tw.Flush()
	if len(rep.Budgets) > 0 {
		fmt.Fprintf(w, "\nbudgets replayed jointly: %d recorded lease messages replaced by the what-if's own (spent includes recorded usage the what-if did not grant)\n", rep.LeaseMessagesDropped)
	}
	fmt.Fprintf(w, "\n%d decisions differ from the recorded ones\n", rep.Differences)
	for _, d := range rep.First {
		fmt.Fprintf(w, "  partition %d, decision #%d:\n    recorded: %s\n    what-if:  %s\n", d.Partition, d.Index, d.Recorded, d.WhatIf)
	}
}

func unionKeys[K ~string, V any](a, b map[K]V) []K {
	ks := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func msTime(ms int64) string {
	if ms == 0 {
		return "start"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}
