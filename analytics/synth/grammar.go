package synth

import (
	"sort"
	"strconv"

	"github.com/sluice-dev/sluice/schemas"
)

// Grammar is the event grammar of a log: every pair of consecutive event
// tokens within one logical request ("^" before its first event, "$"
// after its last), with how often it occurs. A token is an event type
// with the part of its payload that shapes the request's path: a
// Decision's status, a Released's reason class, an Outcome's status, a
// ProviderRejected's HTTP status; an attempt's number is left out (a
// RetryRequested is followed by the next attempt's events). Events of no
// request (ticks, heartbeats, snapshots, configs, provider observations)
// are not part of it.
//
// The test that compares synth's grammar with the recorded logs' is what
// keeps the generator honest: it must write what the gateway writes.
type Grammar map[string]int

// Token names an event in the grammar ("" = not part of it).
func Token(e *schemas.Event) string {
	switch {
	case e.RequestID == "":
		return ""
	case e.ReserveRequested != nil:
		return "reserve"
	case e.Decision != nil:
		return "decision:" + string(e.Decision.Status)
	case e.Dispatched != nil:
		return "dispatched"
	case e.ProviderRejected != nil:
		return "provider_rejected:" + strconv.Itoa(int(e.ProviderRejected.HTTPStatus))
	case e.RetryRequested != nil:
		return "retry"
	case e.Released != nil:
		if e.Released.Reason == schemas.ReasonLateGrant {
			return "released:late_grant"
		}
		if e.Released.InputTokens+e.Released.OutputTokens > 0 {
			return "released:partial"
		}
		return "released:unused"
	case e.Reconciled != nil:
		return "reconciled"
	case e.Outcome != nil:
		return "outcome:" + string(e.Outcome.Status)
	}
	return ""
}

// GrammarOf returns the grammar of recs. A request's events are taken in
// log-time order; a Decision at its ledger time (Decision.log_time_ms),
// since its record reaches sluice.decisions later than the inputs after
// it may reach sluice.requests.
func GrammarOf(recs []Record) Grammar {
	type ev struct {
		ms  int64
		i   int
		tok string
	}
	byReq := map[string][]ev{}
	for i, r := range recs {
		tok := Token(r.Event)
		if tok == "" {
			continue
		}
		ms := r.LogTimeMs
		if d := r.Event.Decision; d != nil && d.LogTimeMs > 0 {
			ms = d.LogTimeMs
		}
		byReq[r.Event.RequestID] = append(byReq[r.Event.RequestID], ev{ms, i, tok})
	}
	g := Grammar{}
	for _, evs := range byReq {
		sort.SliceStable(evs, func(a, b int) bool {
			if evs[a].ms != evs[b].ms {
				return evs[a].ms < evs[b].ms
			}
			return evs[a].i < evs[b].i
		})
		prev := "^"
		for _, e := range evs {
			g[prev+" → "+e.tok]++
			prev = e.tok
		}
		g[prev+" → $"]++
	}
	return g
}

// Shapes is the order-free grammar of a log: every attempt's shape (the
// sorted, distinct tokens of its events; the Outcome counts with the
// attempt its envelope names, the last) with how many attempts have it.
// Log order is left out on purpose: the gateway reports asynchronously, so
// a Dispatched may reach the log after the next attempt's Decision.
type Shapes map[string]int

// ShapesOf returns the attempt shapes of recs.
func ShapesOf(recs []Record) Shapes {
	type key struct {
		req string
		att int32
	}
	toks := map[key]map[string]bool{}
	for _, r := range recs {
		tok := Token(r.Event)
		if tok == "" {
			continue
		}
		k := key{r.Event.RequestID, r.Event.Attempt}
		if toks[k] == nil {
			toks[k] = map[string]bool{}
		}
		toks[k][tok] = true
	}
	s := Shapes{}
	for _, m := range toks {
		var ts []string
		for t := range m {
			ts = append(ts, t)
		}
		sort.Strings(ts)
		shape := ""
		for i, t := range ts {
			if i > 0 {
				shape += " "
			}
			shape += t
		}
		s[shape]++
	}
	return s
}
