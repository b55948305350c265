package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every decoding error caused by the bytes
// themselves (as opposed to a programming error).
var ErrInvalid = errors.New("invalid event")

// Append encodes e and appends it to dst. The encoding is JSON (see
// README.md for why and what it costs). The events of the request path
// take a hand-written fast path (fastencode.go) that writes the same bytes
// as encoding/json.
func Append(dst []byte, e *Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return dst, err
	}
	if out, ok := appendFast(dst, e); ok {
		return out, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return dst, fmt.Errorf("encode %s event: %w", e.Type, err)
	}
	return append(dst, b...), nil
}

// Encode returns the encoding of e, in one allocation for the events of
// the request path (they are a few hundred bytes; a reserve with its path
// and a provider's observations run past 512, and growing the buffer cost
// them a second allocation and a copy on every request).
func Encode(e *Event) ([]byte, error) {
	n := 512
	if e.ReserveRequested != nil || e.ProviderObserved != nil {
		n = 1024
	}
	return Append(make([]byte, 0, n), e)
}

// Decode decodes b into e, which is reset first. Unknown fields are skipped
// (forward compatibility); an event whose payload does not match its type,
// or whose version is unknown, is rejected with an error wrapping ErrInvalid.
// Decode never panics, whatever b holds.
//
// The events Sluice writes itself take a hand-written fast path
// (fastdecode.go); anything else goes through encoding/json, with the same
// result either way.
func Decode(b []byte, e *Event) error {
	*e = Event{}
	if decodeFast(b, e) {
		return e.Validate()
	}
	return decodeJSON(b, e)
}

// decodeJSON is Decode through encoding/json alone.
func decodeJSON(b []byte, e *Event) error {
	*e = Event{}
	if err := json.Unmarshal(b, e); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return e.Validate()
}

// payload returns the number of payloads set and whether the one named by
// e.Type is among them.
func (e *Event) payload() (n int, match bool) {
	check := func(set bool, t Type) {
		if set {
			n++
			if t == e.Type {
				match = true
			}
		}
	}
	check(e.ReserveRequested != nil, TypeReserveRequested)
	check(e.Decision != nil, TypeDecision)
	check(e.Dispatched != nil, TypeDispatched)
	check(e.Reconciled != nil, TypeReconciled)
	check(e.ProviderRejected != nil, TypeProviderRejected)
	check(e.ProviderObserved != nil, TypeProviderObserved)
	check(e.RetryRequested != nil, TypeRetryRequested)
	check(e.Released != nil, TypeReleased)
	check(e.Outcome != nil, TypeOutcome)
	check(e.ConfigChanged != nil, TypeConfigChanged)
	check(e.Tick != nil, TypeTick)
	check(e.Snapshot != nil, TypeSnapshot)
	check(e.Heartbeat != nil, TypeHeartbeat)
	check(e.CapacityLearned != nil, TypeCapacityLearned)
	check(e.LeaseRequested != nil, TypeLeaseRequested)
	check(e.LeaseGranted != nil, TypeLeaseGranted)
	check(e.LeaseReturned != nil, TypeLeaseReturned)
	return n, match
}

// Validate checks the envelope: a known version, an id, a known type and
// exactly the payload that type names.
func (e *Event) Validate() error {
	if e.V < 1 {
		return fmt.Errorf("%w: schema version %d (want ≥ 1)", ErrInvalid, e.V)
	}
	if e.ID == "" {
		return fmt.Errorf("%w: %s event without id", ErrInvalid, e.Type)
	}
	n, match := e.payload()
	if !match || n != 1 {
		return fmt.Errorf("%w: %q event must carry exactly its own payload (has %d payloads)", ErrInvalid, e.Type, n)
	}
	return nil
}

// DeriveWithID returns a new event of type t about the same request attempt
// as e: e's envelope (request id, attempt, node, scope, tenant, key id,
// route, class) with the id and producer time given, and no payload, so
// that the caller sets exactly the one t names (eventid.Derive gives it a
// new id: schemas stays pure). Copying a whole event and swapping its
// payload instead is a trap: the copy of a RetryRequested would keep that
// payload next to the new one, Validate would refuse it, and the event would
// never be produced.
//
// The attempt of a RetryRequested that leaves Attempt unset is the one it
// asks for, PreviousAttempt+1 (the ledger reads it so), and so is the
// derived event's.
func (e *Event) DeriveWithID(id string, t Type, producedAtMs int64) *Event {
	out := &Event{V: Version, Type: t, ID: id, ProducedAtMs: producedAtMs}
	out.RequestID, out.Attempt, out.Node = e.RequestID, e.Attempt, e.Node
	out.Scope, out.Tenant, out.KeyID, out.Route, out.Class = e.Scope, e.Tenant, e.KeyID, e.Route, e.Class
	if e.RetryRequested != nil && e.Attempt <= 0 {
		out.Attempt = e.RetryRequested.PreviousAttempt + 1
	}
	return out
}
