package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/ledger"
)

// Store holds the admin state and commits changes to it.
type Store interface {
	// State returns the newest state this node has applied.
	State() State
	// Update applies op by actor on top of version base, validates the
	// result and commits it with reason. It returns the committed state,
	// or an *apierr.Error: 409 version_conflict when base is not the
	// current version, 4xx for a change the rules refuse.
	Update(ctx context.Context, base int64, actor Actor, reason string, op Op) (State, error)
}

// CheckFunc validates a state against the rest of the running
// configuration (the gateway's providers, routes and classes) and returns
// the ledger document that configuration publishes (config.Config's
// LedgerJSON: the state's ledger document with the entitlements of its
// tenants, teams, keys and partners, so that the ledger enforces an admin
// change to them too); nil accepts and keeps the state's document.
type CheckFunc func(State) (ledgerJSON []byte, err error)

// Prepare is the one code path from a request to the next state, shared by
// every Store: version check, the pure change, canonical ledger document,
// allotment rule and the configuration check.
func Prepare(cur State, base int64, a Actor, op Op, check CheckFunc) (State, *apierr.Error) {
	if base != cur.Version {
		e := apierr.New(http.StatusConflict, apierr.CodeVersionConflict,
			fmt.Sprintf("base_version %d is not the current version %d: read the state again and re-apply the change", base, cur.Version))
		return cur, e
	}
	next, e := Apply(cur, a, op)
	if e != nil {
		return cur, e
	}
	doc, err := ledger.ParseConfig(next.Ledger)
	if err != nil {
		return cur, invalidConfig(err)
	}
	next.setLedgerDoc(doc)
	if e := checkAllotments(&next, &doc); e != nil {
		return cur, e
	}
	if check != nil {
		doc, err := check(next)
		if err != nil {
			return cur, invalidConfig(err)
		}
		if doc != nil {
			next.Ledger = append(json.RawMessage(nil), doc...)
		}
	}
	if n := len(next.Ledger); n > LedgerBytesMax {
		return cur, bad(apierr.CodeInvalidConfig, "the ledger document would be %d bytes, above the %d that one sluice.requests record may hold", n, LedgerBytesMax)
	}
	if n := len(marshalState(next)); n > StateBytesMax {
		return cur, bad(apierr.CodeInvalidConfig, "the admin state would be %d bytes, above its %d-byte bound", n, StateBytesMax)
	}
	return next, nil
}

// Size bounds of one change's records (put a limit on everything): the
// ledger document travels on sluice.requests, whose records the broker
// caps at 1 MiB by default; the admin state on the admin topic, sized for
// it (bus.AdminMaxBytes).
const (
	LedgerBytesMax = 900 << 10
	StateBytesMax  = 6 << 20
)

func invalidConfig(err error) *apierr.Error {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	return apierr.New(http.StatusBadRequest, apierr.CodeInvalidConfig, "the change makes an invalid configuration: "+msg)
}

// checkAllotments keeps every partner's sub-tenants within its allotment:
// per scope and dimension, their tenant-level capacities (as a rate over
// the allotment's period) add up to at most the allotment's. The ledger
// enforces the allotment itself as the org bucket on every request path;
// this rule keeps partners from handing out more than they have.
func checkAllotments(s *State, doc *ledger.Config) *apierr.Error {
	for _, p := range s.Partners {
		var owned []string
		for _, t := range s.Tenants {
			if t.Partner == p.ID {
				owned = append(owned, t.ID)
			}
		}
		for _, sc := range doc.Scopes {
			for _, al := range sc.Buckets {
				if al.Level != ledger.LevelOrg || al.ID != p.ID {
					continue
				}
				var sum float64
				for _, b := range sc.Buckets {
					if b.Level != ledger.LevelTenant || b.Dimension != al.Dimension || !contains(owned, b.ID) {
						continue
					}
					sum += float64(b.Capacity) * periodRatio(al.PeriodMs, b.PeriodMs)
				}
				if sum > float64(al.Capacity) {
					return apierr.New(http.StatusBadRequest, apierr.CodeAllotmentExceeded, fmt.Sprintf(
						"partner %s: its tenants' %s limits in scope %s add up to %.0f per %d ms, above its allotment of %d",
						p.ID, al.Dimension, sc.Name, sum, al.PeriodMs, al.Capacity))
				}
			}
		}
	}
	return nil
}

// periodRatio converts a capacity per b ms into one per a ms (1 when either
// has no period, as concurrency buckets do).
func periodRatio(a, b int64) float64 {
	if a <= 0 || b <= 0 {
		return 1
	}
	return float64(a) / float64(b)
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// MemStore is a Store in memory: one process, no Kafka. Unit tests and
// single-node tools use it; every gateway of a cluster uses KafkaStore.
type MemStore struct {
	mu      sync.Mutex
	st      State
	check   CheckFunc
	onApply func(State)
	// Committed records every committed change, as KafkaStore would write
	// it to sluice.requests.
	Committed []Commit
}

// Commit is one committed change and its audit fields.
type Commit struct {
	State  State
	Actor  string
	Reason string
	Change string
}

// NewMemStore starts from seed. onApply, if not nil, is called with every
// committed state (as a gateway installs it).
func NewMemStore(seed State, check CheckFunc, onApply func(State)) *MemStore {
	return &MemStore{st: seed, check: check, onApply: onApply}
}

// State implements Store.
func (m *MemStore) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// Update implements Store.
func (m *MemStore) Update(_ context.Context, base int64, a Actor, reason string, op Op) (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	next, e := Prepare(m.st, base, a, op, m.check)
	if e != nil {
		return m.st, e
	}
	m.st = next
	m.Committed = append(m.Committed, Commit{State: next, Actor: a.String(), Reason: reason, Change: op.Change()})
	if m.onApply != nil {
		m.onApply(next)
	}
	return next, nil
}

// AsAPIError returns err as an *apierr.Error, or a 503 for an
// infrastructure failure (Kafka unreachable), which the client may retry.
func AsAPIError(err error) *apierr.Error {
	var e *apierr.Error
	if errors.As(err, &e) {
		return e
	}
	return apierr.New(http.StatusServiceUnavailable, apierr.CodeLedgerUnavailable, "the change was not committed: "+err.Error())
}

// marshalState is the admin topic's record payload.
func marshalState(s State) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("admin: marshal state: %v", err))
	}
	return b
}
