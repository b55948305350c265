// Package budget is the budget partition of cross-scope budgets: a pure,
// deterministic state machine, like the ledger, that is the single writer
// of each budget (a tenant's daily spend over every provider, a key's
// monthly tokens) and leases shares of it to the scope partitions whose
// traffic spends it. Holder is the scope partitions' side: what a scope
// holds of each budget, and when it asks, refreshes and returns.
//
// Neither reads a clock, draws randomness, starts a goroutine or does
// I/O; time is the log append time of the records they are given, and
// every output is a function of the state and the input. README.md states
// the allocation rule and its bounds.
package budget

import (
	"errors"
	"fmt"
	"sort"
)

// Unit is what a budget counts.
type Unit string

// Budget units.
const (
	UnitSpendMicros Unit = "spend_micros" // estimated cost in micro-USD (ReserveRequested.SpendMicros)
	UnitTokens      Unit = "tokens"       // input plus reserved output tokens
	UnitRequests    Unit = "requests"     // one per attempt
	// UnitInputTokens and UnitOutputTokens count one side of UnitTokens:
	// the input tokens, or the reserved (then used) output tokens. They
	// hold a split scope's input_tokens and output_tokens limits
	// (ledger/split.go) and may be any budget's unit.
	UnitInputTokens  Unit = "input_tokens"
	UnitOutputTokens Unit = "output_tokens"
)

// Window is how a budget's limit renews.
type Window string

// Budget windows.
const (
	WindowDay     Window = "day"     // a UTC calendar day
	WindowMonth   Window = "month"   // a UTC calendar month
	WindowRolling Window = "rolling" // any RollingMs, counted in Slots sub-windows
)

// Budget is one limit over every provider scope.
type Budget struct {
	ID      string `json:"id"`      // unique; the budget partition's key
	Level   string `json:"level"`   // org, tenant, team, key, or deployment (a split hot scope's provider limit)
	Subject string `json:"subject"` // the id at that level (the tenant's name, a key id)
	Unit    Unit   `json:"unit"`
	Limit   int64  `json:"limit"` // in Unit, per window
	Window  Window `json:"window"`
	// RollingMs is a rolling window's length; Slots the sub-windows it is
	// counted in (default 24): the limit holds over any Slots consecutive
	// slots, so over any RollingMs up to one slot's slack.
	RollingMs int64 `json:"rolling_ms,omitempty"`
	Slots     int64 `json:"slots,omitempty"`
}

// Config is the budgets and the lease protocol's limits. The budget
// partition and every holder must run the same Config (it travels in the
// ledger's ConfigChanged).
type Config struct {
	Budgets []Budget `json:"budgets"`
	// TermMs is the lease term: a holder that charged nothing in a term
	// returns what it holds unused; the budget partition counts a holder
	// that has not been heard from for 2 terms as without demand.
	// Default 2000.
	TermMs int64 `json:"term_ms,omitempty"`
	// RetryMs is how long a holder waits for the answer to a lease message
	// before it sends its counters again (a lost message). Default 500.
	RetryMs int64 `json:"retry_ms,omitempty"`
	// HoldersMax bounds the holders of one budget (scopes that spend it).
	// Default 256.
	HoldersMax int `json:"holders_max,omitempty"`
}

const (
	defaultTermMs     = 2000
	defaultRetryMs    = 500
	defaultHoldersMax = 256
	defaultSlots      = 24
	amountMax         = int64(1) << 50 // largest limit, demand or counter accepted
	idLenMax          = 256
)

// FillDefaults sets the defaults of unset fields.
func (c *Config) FillDefaults() {
	if c.TermMs == 0 {
		c.TermMs = defaultTermMs
	}
	if c.RetryMs == 0 {
		c.RetryMs = defaultRetryMs
	}
	if c.HoldersMax == 0 {
		c.HoldersMax = defaultHoldersMax
	}
	for i := range c.Budgets {
		if c.Budgets[i].Window == WindowRolling && c.Budgets[i].Slots == 0 {
			c.Budgets[i].Slots = defaultSlots
		}
	}
}

// Validate reports every problem of c (after FillDefaults), each with its
// location and reason.
func (c *Config) Validate() error {
	var errs []error
	bad := func(loc, f string, a ...any) { errs = append(errs, fmt.Errorf("%s: %s", loc, fmt.Sprintf(f, a...))) }
	if c.TermMs <= 0 {
		bad("term_ms", "must be > 0, got %d", c.TermMs)
	}
	if c.RetryMs <= 0 || c.RetryMs > c.TermMs {
		bad("retry_ms", "must be in (0, term_ms], got %d", c.RetryMs)
	}
	if c.HoldersMax <= 0 {
		bad("holders_max", "must be > 0, got %d", c.HoldersMax)
	}
	seen := map[string]bool{}
	for i, b := range c.Budgets {
		loc := fmt.Sprintf("budgets[%d]", i)
		switch {
		case b.ID == "" || len(b.ID) > idLenMax:
			bad(loc+".id", "must be 1..%d bytes", idLenMax)
		case seen[b.ID]:
			bad(loc+".id", "%q is defined twice", b.ID)
		}
		seen[b.ID] = true
		switch b.Level {
		case "org", "tenant", "team", "key", "deployment":
		default:
			bad(loc+".level", "must be org, tenant, team, key or deployment, got %q", b.Level)
		}
		if b.Subject == "" {
			bad(loc+".subject", "must name the %s", b.Level)
		}
		switch b.Unit {
		case UnitSpendMicros, UnitTokens, UnitRequests, UnitInputTokens, UnitOutputTokens:
		default:
			bad(loc+".unit", "must be spend_micros, tokens, input_tokens, output_tokens or requests, got %q", b.Unit)
		}
		if b.Limit < 0 || b.Limit > amountMax {
			bad(loc+".limit", "must be in [0, %d], got %d", amountMax, b.Limit)
		}
		switch b.Window {
		case WindowDay, WindowMonth:
			if b.RollingMs != 0 || b.Slots != 0 {
				bad(loc, "rolling_ms and slots are for window rolling only")
			}
		case WindowRolling:
			if b.Slots < 1 || b.Slots > 1440 {
				bad(loc+".slots", "must be in [1, 1440], got %d", b.Slots)
			} else if b.RollingMs < b.Slots || b.RollingMs%b.Slots != 0 {
				bad(loc+".rolling_ms", "must be a positive multiple of slots (%d), got %d", b.Slots, b.RollingMs)
			}
		default:
			bad(loc+".window", "must be day, month or rolling, got %q", b.Window)
		}
	}
	return errors.Join(errs...)
}

// sortedBudgets returns c's budgets ordered by id (the state's order).
func sortedBudgets(c *Config) []Budget {
	out := append([]Budget(nil), c.Budgets...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
