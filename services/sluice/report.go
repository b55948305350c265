package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluice-dev/sluice/analytics"
	"github.com/sluice-dev/sluice/analytics/report"
)

// runReport implements `sluice report`: the weekly calibration report.
func runReport(ctx context.Context, args []string) error {
	fs := newFlags("report")
	ch := fs.String("clickhouse", envOr("SLUICE_CLICKHOUSE_ADDR", "127.0.0.1:19000"), "ClickHouse native address (env SLUICE_CLICKHOUSE_ADDR)")
	db := fs.String("database", analytics.DefaultDatabase, "ClickHouse database the sink writes")
	from := fs.String("from", "", "start of the range, YYYY-MM-DD or RFC 3339 (default: the last full week, Monday 00:00 UTC)")
	to := fs.String("to", "", "end of the range, exclusive (default: --from + 7 days)")
	format := fs.String("format", "md", "output format: "+strings.Join(report.Formats, ", "))
	out := fs.String("out", "", "write the report to this file (default: stdout)")
	patch := fs.String("patch", "", "also write the config patch (JSON) to this file, for `sluice config apply`")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rng, err := reportRange(*from, *to, time.Now())
	if err != nil {
		return err
	}
	if err := analytics.ValidDatabase(*db); err != nil {
		return err
	}
	okFormat := false
	for _, f := range report.Formats {
		okFormat = okFormat || f == *format
	}
	if !okFormat {
		return fmt.Errorf("--format %q: want one of %s", *format, strings.Join(report.Formats, ", "))
	}
	conn, err := analytics.Open(ctx, *ch, "")
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := checkMigrated(ctx, conn, *db, *ch); err != nil {
		return err
	}
	var progress io.Writer = os.Stderr
	if *quiet {
		progress = nil
	}
	t0 := time.Now()
	src := report.NewClickHouse(conn, *db)
	defer src.Close()
	rep, err := report.Build(ctx, src, rng, report.Options{Progress: progress})
	if errors.Is(err, report.ErrNoData) {
		return fmt.Errorf("%w in database %s at %s (is `sluice sink` running? try --from/--to)", err, *db, *ch)
	}
	if err != nil {
		return err
	}
	w := io.Writer(os.Stdout)
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if err := report.Write(w, rep, *format); err != nil {
		return err
	}
	if *patch != "" {
		f, err := os.Create(*patch)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := writePatch(f, rep.Patch); err != nil {
			return err
		}
	}
	if progress != nil {
		fmt.Fprintf(progress, "report: %s – %s done in %.1fs (%d recommendations)\n",
			rng.From.Format("2006-01-02"), rng.To.Format("2006-01-02"), time.Since(t0).Seconds(), len(rep.Recommendations))
	}
	return nil
}

// reportRange parses --from/--to; both empty = the last full week.
func reportRange(from, to string, now time.Time) (analytics.Range, error) {
	if from == "" && to == "" {
		return report.LastFullWeek(now), nil
	}
	parse := func(name, s string) (time.Time, error) {
		for _, layout := range []string{"2006-01-02", time.RFC3339} {
			if t, err := time.Parse(layout, s); err == nil {
				return t.UTC(), nil
			}
		}
		return time.Time{}, fmt.Errorf("--%s %q: want YYYY-MM-DD or RFC 3339", name, s)
	}
	var r analytics.Range
	var err error
	if from == "" {
		return r, errors.New("--to needs --from")
	}
	if r.From, err = parse("from", from); err != nil {
		return r, err
	}
	r.To = r.From.AddDate(0, 0, 7)
	if to != "" {
		if r.To, err = parse("to", to); err != nil {
			return r, err
		}
	}
	if !r.To.After(r.From) {
		return r, fmt.Errorf("--to %s is not after --from %s", r.To.Format(time.RFC3339), r.From.Format(time.RFC3339))
	}
	return r, nil
}

// checkMigrated turns "database doesn't exist" into the fix.
func checkMigrated(ctx context.Context, conn driver.Conn, db, addr string) error {
	ms, err := analytics.Migrations()
	if err != nil {
		return err
	}
	done, err := analytics.AppliedMigrations(ctx, conn, db)
	if err != nil || !done[ms[len(ms)-1].Version] {
		return fmt.Errorf("database %s at %s has no (or old) Sluice analytics tables: run `sluice sink`, which migrates it", db, addr)
	}
	return nil
}
