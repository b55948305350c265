package gateway

import (
	"container/list"
	"crypto/sha256"
	"net/http"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/admission/config"
)

// idemStore remembers Idempotency-Key requests of one gateway node for a
// window: a repeat of a finished request replays its stored response, a
// repeat while the first is in flight gets 409, and a repeat with a
// different body gets 409 too (the key was reused for another request).
//
// Memory is bounded by EntriesMax keys of at most BodyBytesMax bytes each;
// when full, the oldest entry is forgotten — even one in flight, whose
// completion is then simply not stored (safe: a later repeat runs again).
// Only 2xx responses are stored: a refusal (429, 503) must stay retryable
// with the same key.
type idemStore struct {
	mu      sync.Mutex
	entries map[string]*idemEntry
	order   *list.List // of *idemEntry, oldest first
	max     int
	window  time.Duration
	bodyMax int
}

type idemEntry struct {
	key     string
	fp      [32]byte
	done    bool
	stored  bool // body kept for replay (fitted in bodyMax)
	status  int
	header  http.Header
	body    []byte
	expires time.Time
	elem    *list.Element
}

// idemState is what begin found.
type idemState int

const (
	idemFresh    idemState = iota // first sight: run the request
	idemInFlight                  // same key, first still running: 409
	idemReplay                    // same key and body, finished: replay
	idemMismatch                  // same key, different body: 409
	idemTooLarge                  // finished but its response was not kept: 409
)

func newIdemStore(c config.Idempotency) *idemStore {
	return &idemStore{entries: map[string]*idemEntry{}, order: list.New(), max: max(1, c.EntriesMax),
		window: time.Duration(c.WindowMs) * time.Millisecond, bodyMax: c.BodyBytesMax}
}

func idemFingerprint(path string, body []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(body)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// begin looks key up at now. On idemFresh the returned entry is the
// caller's to complete or abandon.
func (s *idemStore) begin(key string, fp [32]byte, now time.Time) (*idemEntry, idemState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[key]; e != nil {
		if now.Before(e.expires) {
			switch {
			case e.fp != fp:
				return e, idemMismatch
			case !e.done:
				return e, idemInFlight
			case !e.stored:
				return e, idemTooLarge
			}
			return e, idemReplay
		}
		s.remove(e)
	}
	for s.order.Len() >= s.max {
		s.remove(s.order.Front().Value.(*idemEntry))
	}
	e := &idemEntry{key: key, fp: fp, expires: now.Add(s.window)}
	e.elem = s.order.PushBack(e)
	s.entries[key] = e
	return e, idemFresh
}

// complete records a 2xx response for replay; anything else forgets the
// key so that the caller may retry with it.
func (s *idemStore) complete(e *idemEntry, status int, h http.Header, body []byte, truncated bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[e.key] != e {
		return // evicted while in flight
	}
	if status < 200 || status > 299 {
		s.remove(e)
		return
	}
	e.done, e.status = true, status
	if !truncated && len(body) <= s.bodyMax {
		e.stored, e.header, e.body = true, h, body
	}
}

func (s *idemStore) remove(e *idemEntry) {
	if e.elem != nil {
		s.order.Remove(e.elem)
		e.elem = nil
	}
	if s.entries[e.key] == e {
		delete(s.entries, e.key)
	}
}

func (s *idemStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}
