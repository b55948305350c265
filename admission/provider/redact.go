package provider

import (
	"strings"

	"github.com/sluice-dev/sluice/admission/config"
)

// SecretMinBytes is the shortest credential Secrets redacts. ScrubMessage's
// patterns know what keys usually look like; Secrets knows the literal
// keys. A "key" shorter than this (a dev gateway accepts any client key,
// "test" or "x") is not a credential worth the name, and redacting it
// would cut ordinary words out of every provider message.
const SecretMinBytes = 8

// redacted replaces a literal credential. It is ScrubMessage's marker, so
// a client cannot tell which of the two found it.
const redacted = "[REDACTED]"

// Secrets are the literal credentials one request's gateway holds: every
// provider key of its config, and the client key the request presented.
// ScrubMessage knows the shapes of credentials (sk-…, Bearer …, long
// mixed tokens); a key of another shape (a 32-letter alphanumeric key that a
// provider echoes in its error) passes it, so every provider message is
// also cut of these literals before it reaches a client, a log or an event.
//
// Secrets is a value over the config the request runs under: building one
// allocates nothing, and neither does Redact when no secret occurs. The zero
// value redacts nothing.
type Secrets struct {
	// Providers are the configured providers; each one's APIKey is a secret.
	Providers []config.Provider
	// Client is the client key of the request ("" = none).
	Client string
}

// SecretsOf returns the secrets of a request under cfg with the client key
// the request presented.
func SecretsOf(cfg *config.Config, client string) Secrets {
	if cfg == nil {
		return Secrets{Client: client}
	}
	return Secrets{Providers: cfg.Providers, Client: client}
}

// each calls f with every secret long enough to redact, and stops when f
// returns false.
func (sc Secrets) each(f func(string) bool) {
	for i := range sc.Providers {
		if k := sc.Providers[i].APIKey(); len(k) >= SecretMinBytes && !f(k) {
			return
		}
	}
	if len(sc.Client) >= SecretMinBytes {
		f(sc.Client)
	}
}

// maxLen is the length of the longest secret (0 = none).
func (sc Secrets) maxLen() int {
	n := 0
	sc.each(func(k string) bool { n = max(n, len(k)); return true })
	return n
}

// Redact returns s with every occurrence of every secret replaced by
// [REDACTED]. When none occurs it returns s itself, without allocating: it
// runs on every provider refusal, and a refusal under a provider storm is
// the common case, not the exception.
func (sc Secrets) Redact(s string) string {
	if s == "" {
		return s
	}
	// The longest secret found first: a client key that contains a provider
	// key (or the reverse) goes whole, not with its ends left around a
	// redacted middle. Bounded: a secret that its own replacement
	// re-creates (one made of "[REDACTED]"'s brackets and letters) cannot
	// loop; no credential has brackets.
	for range len(sc.Providers) + 1 {
		found := ""
		sc.each(func(k string) bool {
			if len(k) > len(found) && strings.Contains(s, k) {
				found = k
			}
			return true
		})
		if found == "" {
			return s
		}
		s = strings.ReplaceAll(s, found, redacted)
	}
	return s
}

// Window returns a prefix of s of at most n bytes that ends on no partial
// secret, redacted. A cut through a secret would leave its head, which no
// full-text search finds; the head is dropped instead. It is how a raw
// error body is bounded before ScrubMessage.
func (sc Secrets) Window(s string, n int) string {
	if len(s) <= n {
		return sc.Redact(s)
	}
	// Redact over a window that holds whole every secret starting before
	// n, then cut at n. What the cut leaves at the end can only be the head
	// of the one secret that the window itself cut: trimPartial drops it.
	m := sc.maxLen()
	w := s[:min(len(s), n+m)]
	w = sc.Redact(w)
	if len(w) > n {
		w = w[:n]
	}
	return sc.trimPartial(w)
}

// trimPartial drops a tail of s that is the head of a secret.
func (sc Secrets) trimPartial(s string) string {
	cut := len(s)
	sc.each(func(k string) bool {
		for l := min(len(k)-1, len(s)); l > 0; l-- {
			if strings.HasSuffix(s, k[:l]) {
				cut = min(cut, len(s)-l)
				break
			}
		}
		return true
	})
	return s[:cut]
}
