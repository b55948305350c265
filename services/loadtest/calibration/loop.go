// Package calibration closes the calibration loop end to end: it runs a load
// scenario whose route reserves about 4× the output it uses against the
// embedded stack (gateway, ledger, provider simulator on kfake), sinks the
// run's events into a real ClickHouse, builds the calibration report,
// applies its patch to the gateway configuration exactly as `sluice config
// apply` does, and reruns the scenario with the patched configuration.
package calibration

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/analytics"
	"github.com/sluice-dev/sluice/analytics/report"
	"github.com/sluice-dev/sluice/internal/bus"
	"github.com/sluice-dev/sluice/services/dev"
	"github.com/sluice-dev/sluice/services/loadtest"
	"github.com/sluice-dev/sluice/services/sim"
)

// Scenario is the loop's load: one tenant asking max_tokens 400 of a
// provider that answers with 20–30 % of it, output-token bound.
//
//go:embed calibration-4x.yaml
var Scenario []byte

// Options configure Run.
type Options struct {
	ClickHouseAddr string
	// Database prefix; each run gets its own database, dropped unless Keep.
	Database string
	Keep     bool
	Duration time.Duration // arrivals per run; default the scenario's
	Progress io.Writer     // nil = silent
}

// RunStats is one run of the scenario.
type RunStats struct {
	Database        string  `json:"database,omitempty"`
	Sent            int     `json:"requests_sent"`
	OK              int     `json:"requests_ok"`
	OutputTokens    int64   `json:"output_tokens_served"`
	Seconds         float64 `json:"arrival_seconds"`
	GoodputRPS      float64 `json:"goodput_rps"`
	GoodputTokensPS float64 `json:"goodput_output_tokens_per_sec"`
	Provider429     int64   `json:"provider_429"`
	StrandedTokenS  float64 `json:"stranded_token_s"`
	OutputBias      float64 `json:"output_estimation_bias"`
	ReservedOutput  float64 `json:"mean_reserved_output_tokens"`
}

// Result is the loop: the run before, the patch, the run after.
type Result struct {
	Before  RunStats        `json:"before"`
	Patch   report.Patch    `json:"patch"`
	Changes []report.Change `json:"changes"`
	After   RunStats        `json:"after"`
}

// Run runs the loop.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Database == "" {
		o.Database = "sluice_loop"
	}
	sc, err := loadtest.ParseScenario(Scenario, "calibration-4x.yaml")
	if err != nil {
		return nil, err
	}
	if o.Duration <= 0 {
		o.Duration = sc.Duration.D()
	}
	conn, err := analytics.Open(ctx, o.ClickHouseAddr, "")
	if err != nil {
		return nil, err
	}
	defer conn.Close()

	res := &Result{}
	before, rep, _, err := runOnce(ctx, o, sc, conn, nil, "before")
	if err != nil {
		return nil, err
	}
	res.Before, res.Patch = before, rep.Patch
	after, _, changes, err := runOnce(ctx, o, sc, conn, &res.Patch, "after")
	if err != nil {
		return nil, err
	}
	res.After, res.Changes = after, changes
	return res, nil
}

func (o Options) say(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "loop: "+format+"\n", a...)
	}
}

// offer sends the scenario's first tenant's requests open-loop at its rate
// for o.Duration, and counts what was sent and served into st.
func (o Options) offer(ctx context.Context, sc *loadtest.Scenario, gatewayURL, key, which string, st *RunStats) error {
	t := sc.Tenants[0]
	body, _ := json.Marshal(map[string]any{"model": sc.Model, "max_tokens": t.MaxTokens,
		"messages": []map[string]string{{"role": "user", "content": strings.Repeat("tok ", int(max(1, t.PromptTokens-8)))}}})
	hc := &http.Client{Timeout: sc.Classes[t.Class].Deadline.D() + 5*time.Second}
	defer hc.CloseIdleConnections()
	start := time.Now()
	o.say("%s: %.0f s of %.1f req/s against %s", which, o.Duration.Seconds(), t.Rate, gatewayURL)
	var mu sync.Mutex
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / t.Rate)
	for i := 0; time.Since(start) < o.Duration; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		st.Sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gatewayURL+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			var out struct {
				Usage struct {
					CompletionTokens int64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&out)
			if resp.StatusCode == http.StatusOK {
				mu.Lock()
				st.OK++
				st.OutputTokens += out.Usage.CompletionTokens
				mu.Unlock()
			}
		}()
	}
	st.Seconds = time.Since(start).Seconds()
	wg.Wait()
	st.GoodputRPS = float64(st.OK) / st.Seconds
	st.GoodputTokensPS = float64(st.OutputTokens) / st.Seconds
	return nil
}

// awaitSink waits until every logical request's Outcome is in ClickHouse,
// then a second more for the inserts that carry the views' rows.
func (o Options) awaitSink(ctx context.Context, conn driver.Conn, db, tenant, which string, sent int, sinkDone <-chan error) error {
	// Wait until every logical request's Outcome is in ClickHouse.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n uint64
		q := "SELECT uniqExact(request_id) FROM `" + db + "`.events WHERE type = 'Outcome' AND tenant = ?"
		if err := conn.QueryRow(ctx, q, tenant).Scan(&n); err != nil {
			n = 0 // the sink may still be migrating
		}
		if int(n) >= sent {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d outcomes reached ClickHouse", which, n, sent)
		}
		select {
		case err := <-sinkDone:
			return fmt.Errorf("sink stopped: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
	}
	// Let the inserts that carry the views' rows return.
	time.Sleep(time.Second)
	return nil
}

// fromReport takes the loop's figures from the report: stranded quota
// and output bias (headline), the route's mean reserved output.
func (st *RunStats) fromReport(rep *report.Report) {
	for _, h := range rep.Headline {
		switch h.Name {
		case "stranded token·s":
			st.StrandedTokenS = h.Value
		case "output estimation bias":
			st.OutputBias = h.Value
		}
	}
	for _, s := range rep.Sections {
		if s.Name != "route_calibration" {
			continue
		}
		for _, row := range s.Rows {
			for i, c := range s.Columns {
				if c == "est_out_mean" {
					if f, ok := row[i].(float64); ok {
						st.ReservedOutput = f
					}
				}
			}
		}
	}
}

func runOnce(ctx context.Context, o Options, sc *loadtest.Scenario, conn driver.Conn, patch *report.Patch, which string) (RunStats, *report.Report, []report.Change, error) {
	var st RunStats
	keys := loadtest.NewKeys(sc)
	simCfg := sc.SimConfig
	var changes []report.Change
	stack, err := dev.Start(ctx, dev.Options{
		Addr: "127.0.0.1:0", Sim: &simCfg, APIKey: "sk-loop-unused",
		Config: func(simURL string) (*config.Config, error) {
			y, err := loadtest.GatewayConfigYAML(sc, simURL, keys)
			if err != nil {
				return nil, err
			}
			if patch != nil {
				// The same code path as `sluice config apply`.
				if y, changes, _, err = report.ApplyPatch(y, *patch); err != nil {
					return nil, err
				}
			}
			return config.Load(bytes.NewReader(y))
		},
	})
	if err != nil {
		return st, nil, nil, fmt.Errorf("embedded stack: %w", err)
	}
	defer stack.Close()
	for _, c := range changes {
		o.say("%s: patched %s", which, c)
	}

	db := fmt.Sprintf("%s_%s_%d", o.Database, which, time.Now().UnixNano()%1e9)
	st.Database = db
	if !o.Keep {
		defer conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`")
	}
	reg := prometheus.NewRegistry()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sinkDone := make(chan error, 1)
	go func() {
		sinkDone <- analytics.RunSink(sctx, analytics.SinkConfig{Brokers: stack.Brokers, Topics: bus.NamesWithPrefix("").All(),
			Group: "loop-" + which, ClickHouseAddr: o.ClickHouseAddr, Database: db, BatchSize: 5000,
			FlushInterval: 200 * time.Millisecond, Registerer: reg}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()

	t := sc.Tenants[0]
	start := time.Now()
	if err := o.offer(ctx, sc, stack.GatewayURL, keys[t.ID], which, &st); err != nil {
		return st, nil, nil, err
	}
	end := time.Now()

	var ss sim.Stats
	if resp, err := http.Get(stack.SimURL + "/sim/stats"); err == nil {
		_ = json.NewDecoder(resp.Body).Decode(&ss)
		resp.Body.Close()
		st.Provider429 = ss.Totals.RateLimited
	}

	o.say("%s: %d sent, %d ok; waiting for the sink", which, st.Sent, st.OK)
	if err := o.awaitSink(ctx, conn, db, t.ID, which, st.Sent, sinkDone); err != nil {
		return st, nil, nil, err
	}

	rng := analytics.Range{From: start.Add(-time.Minute).Truncate(time.Second), To: end.Add(2 * time.Minute).Truncate(time.Second)}
	src := report.NewClickHouse(conn, db)
	defer src.Close()
	rep, err := report.Build(ctx, src, rng, report.Options{})
	if err != nil {
		return st, nil, nil, err
	}
	st.fromReport(rep)
	o.say("%s: goodput %.2f req/s, %.0f output tok/s, stranded %.0f token·s, provider 429s %d",
		which, st.GoodputRPS, st.GoodputTokensPS, st.StrandedTokenS, st.Provider429)
	cancel()
	<-sinkDone
	return st, rep, changes, nil
}
