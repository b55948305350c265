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
	f, rng, err := parseReportFlags(args)
	if err != nil {
		return err
	}
	conn, err := analytics.Open(ctx, f.ch, "")
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := checkMigrated(ctx, conn, f.db, f.ch); err != nil {
		return err
	}
	var progress io.Writer = os.Stderr
	if f.quiet {
		progress = nil
	}
	t0 := time.Now()
	src := report.NewClickHouse(conn, f.db)
	defer src.Close()
	rep, err := report.Build(ctx, src, rng, report.Options{Progress: progress})
	if errors.Is(err, report.ErrNoData) {
		return fmt.Errorf("%w in database %s at %s (is `sluice sink` running? try --from/--to)", err, f.db, f.ch)
	}
	if err != nil {
		return err
	}
	if err := writeReportFiles(rep, f); err != nil {
		return err
	}
	if progress != nil {
		fmt.Fprintf(progress, "report: %s – %s done in %.1fs (%d recommendations)\n",
			rng.From.Format("2006-01-02"), rng.To.Format("2006-01-02"), time.Since(t0).Seconds(), len(rep.Recommendations))
	}
	return nil
}

// reportFlags are the command line of sluice report.
type reportFlags struct {
	ch, db, format, out, patch string
	quiet                      bool
}

// parseReportFlags reads and checks the command line before anything
// connects: the range, the database name and the format.
func parseReportFlags(args []string) (reportFlags, analytics.Range, error) {
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
		return reportFlags{}, analytics.Range{}, err
	}
	rng, err := reportRange(*from, *to, time.Now())
	if err != nil {
		return reportFlags{}, analytics.Range{}, err
	}
	if err := analytics.ValidDatabase(*db); err != nil {
		return reportFlags{}, analytics.Range{}, err
	}
	okFormat := false
	for _, f := range report.Formats {
		okFormat = okFormat || f == *format
	}
	if !okFormat {
		return reportFlags{}, analytics.Range{}, fmt.Errorf("--format %q: want one of %s", *format, strings.Join(report.Formats, ", "))
	}
	return reportFlags{ch: *ch, db: *db, format: *format, out: *out, patch: *patch, quiet: *quiet}, rng, nil
}

// writeReportFiles writes the report to --out (or stdout) in --format and,
// with --patch, its config patch.
func writeReportFiles(rep *report.Report, f reportFlags) error {
	w := io.Writer(os.Stdout)
	if f.out != "" {
		of, err := os.Create(f.out)
		if err != nil {
			return err
		}
		defer of.Close()
		w = of
	}
	if err := report.Write(w, rep, f.format); err != nil {
		return err
	}
	if f.patch != "" {
		pf, err := os.Create(f.patch)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := writePatch(pf, rep.Patch); err != nil {
			return err
		}
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
