package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/ledger"
	"github.com/sluice-dev/sluice/services/ledgerd"
)

// errDiverged makes `sluice replay --verify` exit non-zero.
var errDiverged = errors.New("replay diverged from the recorded decisions")

func runReplay(ctx context.Context, args []string) error {
	fs := newFlags("replay")
	brokers := brokersFlag(fs)
	prefix := prefixFlag(fs)
	verify := fs.Bool("verify", false, "compare re-derived decisions with the recorded ones (required)")
	parts := fs.String("partitions", "", "comma-separated partitions (default: all)")
	fromSnap := fs.Bool("from-snapshot", false, "start from each partition's newest snapshot instead of the log start")
	to := fs.Int64("to-offset", 0, "stop before this input offset (default: the current end)")
	override := fs.String("ledger-config", "", "what-if: replace every ConfigChanged ledger document by this JSON file")
	group := ledgerGroupFlag(fs, "the ledger's consumer group: only inputs it has committed are verified")
	asJSON := fs.Bool("json", false, "print the report (verified ranges, divergences) as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !*verify {
		return errors.New("only --verify is implemented: sluice replay --verify [--partitions 0,1] [--from-snapshot] [--to-offset N] [--group G] [--json]")
	}
	o := ledgerd.ReplayOptions{Brokers: bus.SplitBrokers(*brokers), Topics: bus.NamesWithPrefix(*prefix), FromSnapshot: *fromSnap, ToOffset: *to, Group: *group}
	for _, s := range strings.Split(*parts, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return fmt.Errorf("--partitions: %q is not a partition number", s)
		}
		o.Partitions = append(o.Partitions, int32(p))
	}
	if *override != "" {
		b, err := os.ReadFile(*override)
		if err != nil {
			return fmt.Errorf("--ledger-config: %w", err)
		}
		if _, err := ledger.ParseConfig(b); err != nil {
			return fmt.Errorf("--ledger-config %s: %w", *override, err)
		}
		o.LedgerOverride = b
	}
	if st, err := os.Stderr.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
		o.Progress = os.Stderr
	}
	rep, err := ledgerd.Verify(ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReplay(os.Stdout, rep)
	}
	if len(rep.Divergences) > 0 {
		return errDiverged
	}
	return nil
}

// printReplay writes the verified range of every partition, then the first
// divergence of each diverging partition, or "no divergence".
func printReplay(w io.Writer, rep *ledgerd.ReplayReport) {
	for _, r := range rep.Ranges {
		fmt.Fprintf(w, "partition %d: verified inputs [%d, %d) (end: %s): %d inputs, %d decisions\n",
			r.Partition, r.From, r.To, r.Bound, r.Inputs, r.Decisions)
	}
	fmt.Fprintf(w, "replayed %d partitions, %d inputs, %d decisions\n", rep.Partitions, rep.Inputs, rep.Decisions)
	if len(rep.Divergences) == 0 {
		fmt.Fprintln(w, "no divergence")
		return
	}
	for _, d := range rep.Divergences {
		fmt.Fprint(w, d.String())
	}
}
