package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/analytics"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/schemas"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

const explainUsage = "usage: sluice explain [--clickhouse ADDR | --partition P | --scope S] [--from T] [--json] [--tenant-view] REQUEST_ID"

// runExplain implements `sluice explain REQUEST_ID`.
func runExplain(ctx context.Context, args []string) error {
	fs := newFlags("explain")
	brokers := brokersFlag(fs)
	prefix := prefixFlag(fs)
	ch := fs.String("clickhouse", "", "find the request's partition and time in ClickHouse's events table at this native address (default: search Kafka)")
	db := fs.String("database", analytics.DefaultDatabase, "ClickHouse database the sink writes")
	part := fs.Int("partition", -1, "the request's partition of sluice.requests, if known")
	scope := fs.String("scope", "", "the request's provider scope (its record key decides the partition; a scope split over partitions is searched in each sub-scope any config of the log split it into)")
	from := fs.String("from", "", "search from this time: RFC 3339, unix ms, or a duration before now (24h); default: the log start")
	asJSON := fs.Bool("json", false, "print the explanation as JSON")
	tenantView := fs.Bool("tenant-view", false, "show what the request's tenant sees (GET /v1/sluice/requests/{id}): other tenants as aggregates")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New(explainUsage)
	}
	o := ledgerd.ExplainOptions{Brokers: bus.SplitBrokers(*brokers), Topics: bus.NamesWithPrefix(*prefix), RequestID: fs.Arg(0), Partition: int32(*part)}
	if *scope != "" {
		o.Scopes = []string{*scope}
	}
	var err error
	if o.FromMs, err = parseWhen(*from, time.Now()); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	if *ch != "" {
		if err := locateInClickHouse(ctx, *ch, *db, &o); err != nil {
			return err
		}
	}
	x, err := ledgerd.Explain(ctx, o)
	if err != nil {
		return err
	}
	if *tenantView {
		x = x.ForTenant()
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(x)
	}
	printExplanation(os.Stdout, x)
	return nil
}

// locateInClickHouse sets the request's partition and the time of its
// first input from the sink's events table.
func locateInClickHouse(ctx context.Context, addr, db string, o *ledgerd.ExplainOptions) error {
	if err := analytics.ValidDatabase(db); err != nil {
		return err
	}
	conn, err := analytics.Open(ctx, addr, "")
	if err != nil {
		return err
	}
	defer conn.Close()
	var p uint32
	var first uint64
	q := fmt.Sprintf("SELECT partition, min(log_time_ms) FROM `%s`.events WHERE request_id = ? AND topic = ? GROUP BY partition ORDER BY min(log_time_ms) LIMIT 1", db)
	if err := conn.QueryRow(ctx, q, o.RequestID, o.Topics.OrDefault().Requests).Scan(&p, &first); err != nil {
		return fmt.Errorf("request %q in ClickHouse %s.events: %w", o.RequestID, db, err)
	}
	o.Partition, o.FromMs = int32(p), int64(first)
	return nil
}

// printExplanation renders a timeline for a terminal.
func printExplanation(w io.Writer, x *ledger.Explanation) {
	printExplanationHead(w, x)
	multi := false
	for _, s := range x.Steps {
		multi = multi || s.Partition != x.Partition
	}
	for i := range x.Steps {
		printExplainStep(w, x, &x.Steps[i], multi)
	}
}

// printExplanationHead prints the request, its outcome and, for a request
// that moved (retry or fallback), its attempts.
func printExplanationHead(w io.Writer, x *ledger.Explanation) {
	fmt.Fprintf(w, "request %s — scope %s, tenant %s, key %s, class %s (partition %d)\n", x.RequestID, scopeWords(x.Scope), x.Tenant, x.KeyID, x.Class, x.Partition)
	fmt.Fprintf(w, "outcome: %s", x.Outcome)
	if x.LimitPath != "" {
		how := "limited by"
		if strings.HasPrefix(x.Outcome, string(schemas.StatusGranted)) {
			how = "after waiting for" // the bucket it queued on
		}
		fmt.Fprintf(w, "; %s %s %s", how, x.LimitPath, x.LimitDimension)
	}
	fmt.Fprintln(w)
	if len(x.Hops) > 1 {
		fmt.Fprintln(w, "attempts:")
		for _, h := range x.Hops {
			how := "reserved in"
			switch {
			case h.Fallback:
				how = "fell back to"
			case h.Input == schemas.TypeRetryRequested:
				how = "retried in"
			}
			fmt.Fprintf(w, "  %d. %s %s (partition %d): %s\n", h.Attempt, how, scopeWords(h.Scope), h.Partition, orDash(h.Outcome))
		}
	}
}

// scopeWords names a ledger scope for a reader: a split scope's
// sub-scope (ledger/split.go) as the provider scope it is part of, since
// that is the scope the configuration and the other views speak of.
func scopeWords(scope string) string {
	if base, i, ok := ledger.SplitOf(scope); ok {
		return fmt.Sprintf("%s (sub-scope %d of split scope %s)", scope, i, base)
	}
	return scope
}

// printExplainStep prints one record of the timeline: whose it was, then
// its decisions, buckets, learned limits and queue. multi says the
// timeline spans partitions, so each step names its own.
func printExplainStep(w io.Writer, x *ledger.Explanation, s *ledger.ExplainStep, multi bool) {
	who := "its own"
	if !s.Own {
		who = "another record"
		if s.OtherTenant {
			who = "another tenant's request"
		}
	}
	where := ""
	if multi {
		where = fmt.Sprintf("partition %d ", s.Partition)
	}
	if s.Own && s.Scope != "" && s.Scope != x.Scope {
		who += ", scope " + s.Scope
	}
	fmt.Fprintf(w, "\n%s  %soffset %d  %s (%s, attempt %d)\n", time.UnixMilli(s.LogTimeMs).UTC().Format("15:04:05.000"), where, s.Offset, s.Input, who, s.Attempt)
	if s.Note != "" {
		fmt.Fprintf(w, "  %s\n", s.Note)
	}
	for _, d := range s.Decisions {
		fmt.Fprintln(w, explainDecisionLine(d))
	}
	for _, b := range s.Buckets {
		printExplainBucket(w, b)
	}
	for _, c := range s.Learned {
		fmt.Fprintf(w, "  learned limit: %s:%s %s %d → %d/%s (%s; configured %d)\n", c.Level, c.ID, c.Dimension,
			c.PreviousCapacity, c.LearnedCapacity, periodText(c.PeriodMs), learnedWhy(c), c.ConfiguredCapacity)
	}
	if q := s.Queue; q != nil {
		fmt.Fprintf(w, "  queue: position %d of %d; %d ahead (%d of other tenants)\n", q.Position+1, q.Depth, q.AheadTotal, q.OtherTenantsAhead)
		if ss := q.SlowStart; ss != nil {
			fmt.Fprintf(w, "  slow start: %d of %d attempts in flight (a fallback's scope the provider has not answered yet; each 2xx doubles the window)\n", ss.InFlight, ss.Window)
		}
		for _, a := range q.Ahead {
			fmt.Fprintf(w, "    %s/%d tenant %s key %s %s, waiting %d ms\n", a.RequestID, a.Attempt, a.Tenant, a.KeyID, a.Class, a.WaitedMs)
		}
	}
}

// explainDecisionLine is one decision of a step: status, reason, what the
// gateway does, and the limit, retry hint and shadow verdict if any.
func explainDecisionLine(d schemas.Decision) string {
	line := "  → " + string(d.Status)
	if d.Reason != "" {
		line += " " + string(d.Reason)
	}
	line += " (" + string(d.GatewayDecision) + ")"
	if d.LimitPath != "" {
		line += fmt.Sprintf(": %s %s needed %d, available %d", d.LimitPath, d.LimitDimension, d.Needed, d.Available)
	}
	if d.RetryAfterMs > 0 {
		line += fmt.Sprintf(", retry after %d ms", d.RetryAfterMs)
	}
	if d.Shadow != nil && d.Shadow.Limited {
		line += fmt.Sprintf(" [shadow: %s %s would have limited it]", d.Shadow.LimitPath, d.Shadow.LimitDimension)
	}
	return line
}

// printExplainBucket prints one bucket a step touched; * marks the one
// that limited it.
func printExplainBucket(w io.Writer, b ledger.BucketView) {
	mark := " "
	if b.Limiting {
		mark = "*"
	}
	sh := ""
	if b.Shadow {
		sh = " (shadow)"
	}
	if b.Learned {
		sh += fmt.Sprintf(" (learned from the provider; configured %d)", b.Configured)
	}
	fmt.Fprintf(w, "  %s %-28s %-14s %-11s cap %d/%s max %d: %d → %d, needs %d, held %d%s\n", mark, b.Node, b.Dimension, b.Refill,
		b.Capacity, periodText(b.PeriodMs), b.Max, b.Before, b.After, b.Needed, b.Held, sh)
}

func periodText(ms int64) string {
	if ms <= 0 {
		return "in flight"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// learnedWhy says what taught the ledger a learned limit.
func learnedWhy(c schemas.CapacityLearned) string {
	switch c.Source {
	case schemas.LearnedHeaders:
		return fmt.Sprintf("the provider's rate-limit headers report %d", c.ReportedLimit)
	case schemas.LearnedRefusal:
		return "lowered after a provider refusal without rate-limit headers"
	case schemas.LearnedSuccess:
		return "raised after sustained success"
	case schemas.LearnedRemaining:
		return fmt.Sprintf("the provider's remaining count plus what was granted in its minute bound it by %d", c.ReportedLimit)
	}
	return c.Source
}
