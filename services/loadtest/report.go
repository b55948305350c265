package loadtest

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/services/sim"
)

// ReportSchema names the JSON report format (README.md documents it).
const ReportSchema = "sluice.loadtest/v1"

// Outcome values of a logical request.
const (
	OutSuccess      = "success"
	OutCancelled    = "cancelled"     // the client abandoned it (cancel_fraction)
	OutTimeout      = "timeout"       // deadline passed: client deadline or queued_then_expired
	OutFinalFailure = "final_failure" // refused or failed after the client's retries
	OutUnfinished   = "unfinished"    // still in flight when the drain period ended
	OutDropped      = "dropped"       // not sent: the client's in-flight cap was reached
)

// Report is the result of one run (the --json output).
type Report struct {
	Schema      string     `json:"schema"`
	Scenario    string     `json:"scenario"`
	Description string     `json:"description,omitempty"`
	Mode        string     `json:"mode"` // embedded | stack | gateway | baseline
	Conditions  Conditions `json:"conditions"`

	// Provider429 counts 429s the providers sent (every provider dialect
	// of the simulator, fallbacks included): the simulator's own count
	// when its /sim/stats is reachable (provider_429_source "simulator"),
	// else the client-observed provider 429s ("client").
	Provider429       int64  `json:"provider_429"`
	Provider503       int64  `json:"provider_503"`
	Provider429Source string `json:"provider_429_source"`
	// Local429 counts Sluice's own 429 refusals seen by the client.
	Local429 int64 `json:"local_429"`
	// UpstreamAttempts are the requests the provider received (the
	// simulator's count, same source as provider_429, so the gateway's own
	// retries are included); RetryAmplification = UpstreamAttempts ÷ logical
	// requests.
	UpstreamAttempts   int64   `json:"upstream_attempts"`
	RetryAmplification float64 `json:"retry_amplification"`
	// Wasted counts upstream calls cancelled in flight: the provider
	// served (and charged) them, and their client had gone.
	Wasted Wasted `json:"wasted"`
	// GoodputRatio = Goodput.Ratio.
	GoodputRatio float64 `json:"goodput_ratio"`
	Goodput      Goodput `json:"goodput"`
	// JainFairness is the lowest Jain index among groups of ≥ 2 tenants of
	// equal weight (see Fairness); null when no such group exists.
	JainFairness *float64 `json:"jain_fairness"`
	Fairness     Fairness `json:"fairness"`

	Totals  Group             `json:"totals"`
	Tenants []TenantReport    `json:"tenants"`
	Classes map[string]*Group `json:"classes"`
	Routes  map[string]*Group `json:"routes"`
	// Simulator is the /sim/stats delta over the whole run (nil when the
	// simulator was not reachable).
	// It sums every provider dialect the run reached (a fallback's
	// included), so provider_429, upstream_attempts and wasted count them
	// all; SimulatorProviders splits it when more than one saw calls.
	Simulator          *sim.ProviderStats            `json:"simulator,omitempty"`
	SimulatorProviders map[string]*sim.ProviderStats `json:"simulator_providers,omitempty"`
	// Stack is the ledger service's health in a --brokers run.
	Stack *StackReport `json:"stack,omitempty"`
	// Budgets are an --embedded run's cross-scope budgets, read from the
	// in-process broker's committed log as a --brokers run reads them
	// (there they are stack.budgets).
	Budgets []BudgetReport `json:"budgets,omitempty"`
	// CapacityStorm is what was served through the scenario's first
	// capacity storm (absent without one).
	CapacityStorm *StormReport `json:"capacity_storm,omitempty"`
}

// Wasted is the provider work nobody read: calls the simulator admitted
// whose client (the gateway, or the caller straight to the simulator) went
// away before the answer was complete, typically because the caller's
// timeout passed while the call was in flight.
type Wasted struct {
	Source        string `json:"source"`         // simulator | unavailable
	UpstreamCalls int64  `json:"upstream_calls"` // the simulator's cancelled count
	Tokens        int64  `json:"tokens"`         // their input and output sent
	// Ratio = UpstreamCalls ÷ the calls the simulator admitted (served or
	// cancelled).
	Ratio float64 `json:"ratio"`
}

// Conditions records how the run was made.
type Conditions struct {
	Version     string    `json:"version"`
	GoVersion   string    `json:"go_version"`
	Seed        uint64    `json:"seed"`
	StartedAt   time.Time `json:"started_at"`
	EndedAt     time.Time `json:"ended_at"`
	DurationS   float64   `json:"duration_s"`
	DrainS      float64   `json:"drain_s"`
	Target      string    `json:"target"`
	SimURL      string    `json:"sim_url,omitempty"`
	Routes      []string  `json:"routes"`
	Model       string    `json:"model"`
	Provider    string    `json:"provider"`
	Streaming   bool      `json:"streaming"`
	Arrivals    string    `json:"arrivals"`
	Concurrency struct {
		MaxInFlight int `json:"max_in_flight"`
		Limit       int `json:"limit"`
	} `json:"concurrency"`
	Timeouts       map[string]ClassConditions `json:"timeouts"`
	ClientRetries  int                        `json:"client_retries"`
	ClientBackoff  string                     `json:"client_backoff"`
	ProviderLimits sim.Limits                 `json:"provider_limits"`
	SluiceQuota    *SluiceQuota               `json:"sluice_quota,omitempty"`
	// GatewayConfig is the gateway config of an embedded or --brokers run:
	// "generated" from the scenario, or the --config file's path.
	GatewayConfig   string           `json:"gateway_config,omitempty"`
	Storms          []sim.Storm      `json:"storms,omitempty"`
	SimLatency      sim.Latency      `json:"sim_latency"`
	SimOutput       sim.OutputSpread `json:"sim_output"`
	QueueWaitSource string           `json:"queue_wait_source"`
}

// ClassConditions are one class's deadline and queue policy.
type ClassConditions struct {
	DeadlineMs  int64 `json:"deadline_ms"`
	MaxWaitMs   int64 `json:"max_wait_ms"`
	MaxDepth    int   `json:"max_depth"`
	AgeOffsetMs int64 `json:"age_offset_ms"`
}

// Goodput is the provider capacity turned into useful work during the
// arrival window: served per second ÷ the provider limit's rate, per limited
// dimension; the binding dimension is the one closest to its limit.
type Goodput struct {
	Source      string  `json:"source"` // simulator | client
	WindowS     float64 `json:"window_s"`
	Binding     string  `json:"binding"`
	ServedPerS  float64 `json:"served_per_s"`
	LimitPerS   float64 `json:"limit_per_s"`
	Ratio       float64 `json:"ratio"`
	SluicePerS  float64 `json:"sluice_limit_per_s,omitempty"`
	SluiceRatio float64 `json:"ratio_to_sluice_limit,omitempty"`
	// DemandRatio is the offered load ÷ the provider limit on the most
	// demanded dimension (> 1: demand exceeds capacity).
	DemandRatio float64      `json:"demand_ratio"`
	Dimensions  []GoodputDim `json:"dimensions"`
	Note        string       `json:"note,omitempty"`
}

// GoodputDim is one limited dimension.
type GoodputDim struct {
	Dimension   string  `json:"dimension"`
	ServedPerS  float64 `json:"served_per_s"`
	OfferedPerS float64 `json:"offered_per_s"`
	LimitPerS   float64 `json:"limit_per_s"`
	Ratio       float64 `json:"ratio"`
}

// Fairness explains jain_fairness.
type Fairness struct {
	Method string      `json:"method"`
	Groups []FairGroup `json:"groups"`
}

// FairGroup is the tenants of one weight.
type FairGroup struct {
	Weight  int64    `json:"weight"`
	Tenants []string `json:"tenants"`
	// Jain over served ÷ weighted max-min fair share.
	Jain *float64 `json:"jain"`
	// JainThroughput over raw throughput ÷ weight.
	JainThroughput *float64 `json:"jain_throughput"`
}

// TenantReport is one tenant's Group plus its fair share.
type TenantReport struct {
	ID     string `json:"id"`
	Weight int64  `json:"weight"`
	Class  string `json:"class"`
	Group
	FairShareRPS float64 `json:"fair_share_rps"`
	// FairRatio = throughput_rps ÷ fair_share_rps.
	FairRatio float64 `json:"fair_ratio"`
}

// Group aggregates the logical requests of a tenant, class, route or all.
type Group struct {
	Requests   int     `json:"requests"`
	OfferedRPS float64 `json:"offered_rps"`
	// Dispatched = logical requests that reached the provider at least once;
	// AcceptanceRate = Dispatched ÷ Requests.
	Dispatched     int     `json:"dispatched"`
	AcceptanceRate float64 `json:"acceptance_rate"`
	// UpstreamAttempts counts attempts that reached the provider;
	// RetryAmplification = UpstreamAttempts ÷ Requests.
	UpstreamAttempts   int     `json:"upstream_attempts"`
	RetryAmplification float64 `json:"retry_amplification"`
	// Provider429 (provider_429_ratio = ÷ upstream attempts) and Local429
	// (local_429_ratio = ÷ requests) as seen by the client: a provider
	// 429 counts here only when it is the answer the client got, so a
	// 429 the gateway retried and then served counts in the top-level
	// provider_429 (the simulator's own count) and not here. That is why
	// totals.provider_429 can be well under the top-level figure
	// (capacity-storm-bare: 2 against 14).
	Provider429      int      `json:"provider_429"`
	Provider503      int      `json:"provider_503"`
	Local429         int      `json:"local_429"`
	Provider429Ratio float64  `json:"provider_429_ratio"`
	Local429Ratio    float64  `json:"local_429_ratio"`
	Outcomes         Outcomes `json:"outcomes"`
	DeadlineMisses   int      `json:"deadline_misses"`
	ThroughputRPS    float64  `json:"throughput_rps"`
	QueueWaitMs      Dist     `json:"queue_wait_ms"`
	LatencyMs        Dist     `json:"latency_ms"`
	// GatewayDecisions counts the gateway_decision of final error responses.
	GatewayDecisions map[string]int `json:"gateway_decisions,omitempty"`
}

// Outcomes is the outcome mix of logical requests.
type Outcomes struct {
	Success      int `json:"success"`
	Cancelled    int `json:"cancelled"`
	Timeout      int `json:"timeout"`
	FinalFailure int `json:"final_failure"`
	Unfinished   int `json:"unfinished"`
	Dropped      int `json:"dropped"`
}

// record is the result of one logical request.
type record struct {
	tenant     int
	class      string
	route      string
	latency    time.Duration
	outcome    string
	status     int
	decision   string
	code       string
	attempts   int
	upstream   int
	p429, p503 int
	l429       int
	queueMs    float64
	queueKnown bool
	dispatched bool
	doneAt     time.Duration // completion, from the start of the run
}

type groupAcc struct {
	g        Group
	qw, lat  []float64
	inWindow int // successes completed within the arrival window
	window   time.Duration
}

func (a *groupAcc) add(r *record) {
	g := &a.g
	g.Requests++
	if r.dispatched {
		g.Dispatched++
	}
	g.UpstreamAttempts += r.upstream
	g.Provider429 += r.p429
	g.Provider503 += r.p503
	g.Local429 += r.l429
	switch r.outcome {
	case OutSuccess:
		g.Outcomes.Success++
		if r.doneAt <= a.window {
			a.inWindow++
		}
		a.qw = append(a.qw, r.queueMs)
		a.lat = append(a.lat, float64(r.latency.Microseconds())/1000)
	case OutCancelled:
		g.Outcomes.Cancelled++
	case OutTimeout:
		g.Outcomes.Timeout++
		g.DeadlineMisses++
	case OutUnfinished:
		g.Outcomes.Unfinished++
	case OutDropped:
		g.Outcomes.Dropped++
	default:
		g.Outcomes.FinalFailure++
	}
	if r.decision != "" && r.outcome != OutSuccess {
		if g.GatewayDecisions == nil {
			g.GatewayDecisions = map[string]int{}
		}
		g.GatewayDecisions[r.decision]++
	}
}

func (a *groupAcc) finish(dur time.Duration, offered float64) *Group {
	g := a.g
	secs := dur.Seconds()
	g.OfferedRPS = round3(offered)
	g.AcceptanceRate = ratio(float64(g.Dispatched), float64(g.Requests))
	g.RetryAmplification = ratio(float64(g.UpstreamAttempts), float64(g.Requests))
	g.Provider429Ratio = ratio(float64(g.Provider429), float64(g.UpstreamAttempts))
	g.Local429Ratio = ratio(float64(g.Local429), float64(g.Requests))
	g.ThroughputRPS = ratio(float64(a.inWindow), secs)
	g.QueueWaitMs = Summarise(a.qw)
	g.LatencyMs = Summarise(a.lat)
	return &g
}

func ptr(x float64) *float64 { return &x }

// fairness computes the per-weight groups and the headline index.
func fairness(sc *Scenario, tenants []TenantReport) (Fairness, *float64) {
	f := Fairness{Method: "Jain's index per group of equal-weight tenants over x_i = throughput_i ÷ fair_share_i, " +
		"fair shares by weighted max-min water filling of the total throughput over the arrived, non-cancelled demand; " +
		"jain_throughput uses x_i = throughput_i ÷ weight_i; jain_fairness = the lowest group index"}
	byW := map[int64][]int{}
	for i, t := range tenants {
		byW[t.Weight] = append(byW[t.Weight], i)
	}
	ws := make([]int64, 0, len(byW))
	for w := range byW {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	var headline *float64
	for _, w := range ws {
		fg := FairGroup{Weight: w}
		var xs, raw []float64
		for _, i := range byW[w] {
			t := tenants[i]
			fg.Tenants = append(fg.Tenants, t.ID)
			if t.FairShareRPS > 0 {
				xs = append(xs, t.ThroughputRPS/t.FairShareRPS)
			}
			raw = append(raw, t.ThroughputRPS/float64(w))
		}
		if len(byW[w]) >= 2 {
			if j, ok := Jain(xs); ok {
				fg.Jain = ptr(round3(j))
				if headline == nil || *fg.Jain < *headline {
					headline = ptr(*fg.Jain)
				}
			}
			if j, ok := Jain(raw); ok {
				fg.JainThroughput = ptr(round3(j))
			}
		}
		f.Groups = append(f.Groups, fg)
	}
	_ = sc
	return f, headline
}

// WriteText prints the human-readable report.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	c := r.Conditions
	fmt.Fprintf(&b, "sluice loadtest — scenario %s (%s)\n", r.Scenario, r.Mode)
	if r.Description != "" {
		fmt.Fprintf(&b, "  %s\n", r.Description)
	}
	fmt.Fprintf(&b, "  target %s · model %s · %s open-loop Poisson, seed %d · %.0fs + drain %.0fs\n", c.Target, c.Model, c.Provider, c.Seed, c.DurationS, c.DrainS)
	fmt.Fprintf(&b, "  %s → %s · version %s · max in flight %d\n", c.StartedAt.Format(time.RFC3339), c.EndedAt.Format(time.RFC3339), c.Version, c.Concurrency.MaxInFlight)
	pl := c.ProviderLimits
	fmt.Fprintf(&b, "  provider limits: rpm %d tpm %d itpm %d otpm %d rpd %d window %s", pl.RPM, pl.TPM, pl.ITPM, pl.OTPM, pl.RPD, pl.Window.D())
	if q := c.SluiceQuota; q != nil {
		fmt.Fprintf(&b, " · sluice: rpm %d tpm %d rpd %d window %dms (×%.2f)", q.RequestsPerMin, q.TokensPerMin, q.RequestsPerDay, q.WindowMs, q.Factor)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "\n  provider_429 %d (%s) · provider_503 %d · local_429 %d · upstream attempts %d (retry amplification %.2f)\n",
		r.Provider429, r.Provider429Source, r.Provider503, r.Local429, r.UpstreamAttempts, r.RetryAmplification)
	fmt.Fprintf(&b, "  wasted: %d upstream calls cancelled in flight (%.1f %% of admitted), %d tokens (%s)\n",
		r.Wasted.UpstreamCalls, 100*r.Wasted.Ratio, r.Wasted.Tokens, r.Wasted.Source)
	g := r.Goodput
	fmt.Fprintf(&b, "  goodput_ratio %.3f (binding %s: %.2f/s served of %.2f/s; demand %.2f× capacity)\n", r.GoodputRatio, g.Binding, g.ServedPerS, g.LimitPerS, g.DemandRatio)
	if r.JainFairness != nil {
		fmt.Fprintf(&b, "  jain_fairness %.3f\n", *r.JainFairness)
	} else {
		b.WriteString("  jain_fairness n/a (no two tenants of equal weight)\n")
	}
	if st := r.Stack; st != nil {
		fmt.Fprintf(&b, "  stack on %s (%d ledgers, prefix %s): transaction_aborts %d · snapshots_written %d · partition_rebuilds %d · ledger_unavailable %d\n",
			st.Brokers, st.Ledgers, st.TopicPrefix, st.TransactionAborts, st.SnapshotsWritten, st.Rebuilds, st.LedgerUnavailable)
		fmt.Fprintf(&b, "  decisions %d · longest gap %d ms (as acted on: %d ms) · doubled %d · undecided %d · snapshots of busiest partition %d: %d · logs %s\n",
			st.Decisions, st.LongestDecisionGapMs, st.ActedDecisionGapMs, st.DecisionsDoubled, st.RequestsUndecided, st.BusiestPartition, st.BusiestSnapshots, st.LogsDir)
		for _, f := range st.Faults {
			fmt.Fprintf(&b, "  fault: %s\n", f)
		}
		writeBudgets(&b, st.Budgets)
	} else {
		writeBudgets(&b, r.Budgets)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "group\treq\tok\tcancel\ttimeout\tfail\taccept\tamplif\tp429\tl429\tqwait p50\tp95\tp99\tthru/s\tfair\t")
	row := func(name string, gr *Group, fair string) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.2f\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.2f\t%s\t\n", name, gr.Requests, gr.Outcomes.Success,
			gr.Outcomes.Cancelled, gr.Outcomes.Timeout, gr.Outcomes.FinalFailure+gr.Outcomes.Unfinished+gr.Outcomes.Dropped,
			gr.AcceptanceRate, gr.RetryAmplification, gr.Provider429, gr.Local429, gr.QueueWaitMs.P50, gr.QueueWaitMs.P95, gr.QueueWaitMs.P99, gr.ThroughputRPS, fair)
	}
	for i := range r.Tenants {
		t := &r.Tenants[i]
		row("tenant "+t.ID, &t.Group, fmt.Sprintf("%.2f", t.FairRatio))
	}
	for _, k := range sortedKeys(r.Classes) {
		row("class "+k, r.Classes[k], "")
	}
	for _, k := range sortedKeys(r.Routes) {
		row("route "+k, r.Routes[k], "")
	}
	row("total", &r.Totals, "")
	_ = tw.Flush()
	fmt.Fprintf(&b, "\n  queue wait source: %s\n", c.QueueWaitSource)
	_, err := io.WriteString(w, b.String())
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// computeGoodput fills the goodput section from the simulator's counters
// over the arrival window (delta), the provider limits and the offered load.
func computeGoodput(sc *Scenario, delta *sim.ProviderStats, window time.Duration, offeredRPS, offeredTPS, offeredIn, offeredOut float64, q *SluiceQuota, clientOK int) Goodput {
	lim := sc.ProviderLimits()
	secs := window.Seconds()
	g := Goodput{Source: "simulator", WindowS: round3(secs)}
	var served map[string]float64
	if delta != nil {
		served = map[string]float64{
			"requests":      float64(delta.OK) / secs,
			"total_tokens":  float64(delta.Tokens.Total) / secs,
			"input_tokens":  float64(delta.Tokens.Input) / secs,
			"output_tokens": float64(delta.Tokens.Output) / secs,
		}
	} else {
		g.Source = "client"
		g.Note = "simulator stats unavailable: requests served counted from client successes; token dimensions omitted"
		served = map[string]float64{"requests": float64(clientOK) / secs}
	}
	type dim struct {
		name    string
		limit   int64
		sluice  int64
		offered float64
	}
	var sl SluiceQuota
	if q != nil {
		sl = *q
	}
	dims := []dim{
		{"requests", lim.RPM, sl.RequestsPerMin, offeredRPS},
		{"total_tokens", lim.TPM, sl.TokensPerMin, offeredTPS},
		{"input_tokens", lim.ITPM, sl.InputTokensPerMin, offeredIn},
		{"output_tokens", lim.OTPM, sl.OutputTokensPerMin, offeredOut},
	}
	best := -1.0
	for _, d := range dims {
		s, ok := served[d.name]
		if d.limit <= 0 || !ok {
			continue
		}
		lps := float64(d.limit) / 60
		gd := GoodputDim{Dimension: d.name, ServedPerS: round3(s), OfferedPerS: round3(d.offered), LimitPerS: round3(lps), Ratio: ratio(s, lps)}
		g.Dimensions = append(g.Dimensions, gd)
		g.DemandRatio = math.Max(g.DemandRatio, ratio(d.offered, lps))
		if gd.Ratio > best {
			best = gd.Ratio
			g.Binding, g.ServedPerS, g.LimitPerS, g.Ratio = d.name, gd.ServedPerS, gd.LimitPerS, gd.Ratio
			g.SluicePerS, g.SluiceRatio = 0, 0
			if d.sluice > 0 {
				g.SluicePerS = round3(float64(d.sluice) / 60)
				g.SluiceRatio = ratio(s, float64(d.sluice)/60)
			}
		}
	}
	if g.Binding == "" {
		g.Note = strings.TrimSpace(g.Note + " no per-minute provider limit to measure goodput against")
	}
	return g
}

// StormReport measures a capacity storm (issue 20 item 4) by the
// successes' completion times, from the start of the run (the simulator's
// storms are re-based on it): what was served inside the storm against what
// its reduced capacity allows, and how soon the full rate was back after it.
type StormReport struct {
	StartS   float64 `json:"start_s"`
	EndS     float64 `json:"end_s"`
	Fraction float64 `json:"fraction"`
	// ServedPerS counts the successes completed in each second of the run.
	ServedPerS []int `json:"served_per_s"`
	// Served counts the successes completed inside the storm; Allowed is
	// what its reduced capacity allows there: min(offered rate, fraction ×
	// the provider's RPM ÷ 60) × its length; ServedRatio = Served ÷ Allowed.
	Served      int     `json:"served"`
	Allowed     float64 `json:"allowed"`
	ServedRatio float64 `json:"served_ratio"`
	// FullRPS is the full rate: min(offered rate, RPM ÷ 60). RecoveredS is
	// the time after the storm's end until the first 2 s in which the
	// successes' rate was at least 90 % of it (-1: not within the run).
	FullRPS    float64 `json:"full_rps"`
	RecoveredS float64 `json:"recovered_s"`
}

// stormReport builds the StormReport of sc's first capacity storm, or nil.
func stormReport(sc *Scenario, records []record, dur time.Duration, offRPS float64) *StormReport {
	var st *sim.Storm
	for i := range sc.SimConfig.Storms {
		if sc.SimConfig.Storms[i].Kind == sim.StormCapacity {
			st = &sc.SimConfig.Storms[i]
			break
		}
	}
	lim := sc.ProviderLimits()
	if st == nil || lim.RPM <= 0 {
		return nil
	}
	start, end := st.Start.D(), st.End.D()
	if end <= start {
		end = dur
	}
	secs := int(dur/time.Second) + 1
	for _, r := range records {
		if r.outcome == "success" {
			secs = max(secs, int(r.doneAt/time.Second)+1)
		}
	}
	sr := &StormReport{StartS: start.Seconds(), EndS: end.Seconds(), Fraction: st.Fraction, ServedPerS: make([]int, secs)}
	for _, r := range records {
		if r.outcome != "success" {
			continue
		}
		sr.ServedPerS[int(r.doneAt/time.Second)]++
		if r.doneAt >= start && r.doneAt < end {
			sr.Served++
		}
	}
	full := float64(lim.RPM) / 60
	sr.FullRPS = round3(min(offRPS, full))
	sr.Allowed = round3(min(offRPS, st.Fraction*full) * (end - start).Seconds())
	sr.ServedRatio = ratio(float64(sr.Served), sr.Allowed)
	sr.RecoveredS = -1
	for t := int(end / time.Second); t+1 < int(dur/time.Second)+1 && t+1 < secs; t++ {
		if float64(sr.ServedPerS[t]+sr.ServedPerS[t+1]) >= 2*0.9*sr.FullRPS {
			sr.RecoveredS = round3(float64(t) - end.Seconds())
			break
		}
	}
	return sr
}
