package main

import (
	"context"
	"errors"
	"fmt"
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*verify {
		return errors.New("only --verify is implemented: sluice replay --verify [--partitions 0,1] [--from-snapshot] [--to-offset N]")
	}
	o := ledgerd.ReplayOptions{Brokers: bus.SplitBrokers(*brokers), Topics: bus.NamesWithPrefix(*prefix), FromSnapshot: *fromSnap, ToOffset: *to}
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
	fmt.Printf("replayed %d partitions, %d inputs, %d decisions\n", rep.Partitions, rep.Inputs, rep.Decisions)
	if len(rep.Divergences) == 0 {
		fmt.Println("no divergence")
		return nil
	}
	for _, d := range rep.Divergences {
		fmt.Print(d.String())
	}
	return errDiverged
}
