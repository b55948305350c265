// Package eventid stamps new events with their id. It is apart from
// schemas because an id (a UUIDv7) takes the clock and the OS's random
// source, and schemas must stay pure: the ledger and the lifecycle, pure
// state machines, decode and build events with it (their purity is checked
// over everything they reach, internal/purity). The shells stamp the ids.
package eventid

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/sluice-dev/sluice/schemas"
)

// NewID returns a new time-ordered event id (UUIDv7).
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		// NewV7 fails only if the OS random source fails; nothing sane to do.
		panic(fmt.Sprintf("schemas: uuid: %v", err))
	}
	return id.String()
}

// New returns an envelope of type t with version, id and producer time set.
func New(t schemas.Type, producedAtMs int64) *schemas.Event {
	return &schemas.Event{V: schemas.Version, Type: t, ID: NewID(), ProducedAtMs: producedAtMs}
}

// Derive returns a new event of type t about the same request attempt as e,
// with a new id (schemas.Event.DeriveWithID says what it carries).
func Derive(e *schemas.Event, t schemas.Type, producedAtMs int64) *schemas.Event {
	return e.DeriveWithID(NewID(), t, producedAtMs)
}
