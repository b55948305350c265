// Package eventid stamps new events with their id. It is apart from
// schemas because an id (a UUIDv7) takes the clock and the OS's random
// source, and schemas must stay pure: the ledger and the lifecycle, pure
// state machines, decode and build events with it (their purity is checked
// over everything they reach, internal/purity). The shells stamp the ids.
package eventid

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/schemas"
)

// NewID returns a new time-ordered event id (UUIDv7, RFC 9562), in the
// canonical 36-character form. It builds the id as google/uuid's NewV7
// does (48 bits of Unix milliseconds, then 12 bits of sub-millisecond
// sequence kept strictly increasing within the process, then random bits),
// but reads the random bits into a stack array and formats into another,
// so that an id costs one allocation (the string) instead of three: every
// request stamps about five of them on the gateway's hot path (issue 25).
func NewID() string {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		// Read fails only if the OS random source fails; nothing sane to do.
		panic(fmt.Sprintf("schemas: event id: %v", err))
	}
	t, seq := v7Time()
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(t>>40), byte(t>>32), byte(t>>24), byte(t>>16), byte(t>>8), byte(t)
	u[6] = 0x70 | (0x0F & byte(seq>>8)) // version 7
	u[7] = byte(seq)
	u[8] = (u[8] & 0x3f) | 0x80 // variant 10
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// The last (millisecond<<12 | sequence) handed out, so that ids stamped in
// one process sort in the order they were made even within a millisecond
// or across a clock step back (google/uuid's getV7Time, whose state is
// private to it).
var (
	v7Mu   sync.Mutex
	lastV7 int64
)

// v7Time returns the milliseconds and the 12-bit sequence of a new id:
// the sequence is the sub-millisecond time in units of 256 ns (0–3906),
// bumped past the last id's when the clock has not moved on.
func v7Time() (milli, seq int64) {
	nano := time.Now().UnixNano()
	milli = nano / 1e6
	seq = (nano - milli*1e6) >> 8
	now := milli<<12 + seq
	v7Mu.Lock()
	if now <= lastV7 {
		now = lastV7 + 1
	}
	lastV7 = now
	v7Mu.Unlock()
	return now >> 12, now & 0xfff
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
