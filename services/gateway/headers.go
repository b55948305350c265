package gateway

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/config"
)

// Request headers a caller may send to steer admission.
const (
	HeaderClass      = "X-Sluice-Class"
	HeaderPriority   = "X-Sluice-Priority"
	HeaderDeadlineMs = "X-Sluice-Deadline-Ms"
	HeaderFallback   = "X-Sluice-Fallback"
	HeaderRequestID  = "X-Sluice-Request-Id"
	// Response headers: how long the request waited for capacity
	// (enqueue → first upstream attempt) and how many upstream attempts it
	// took, so clients and load tests see the governor's cost directly.
	HeaderQueueMs     = "X-Sluice-Queue-Ms"
	HeaderAttempts    = "X-Sluice-Attempts"
	HeaderIdempotency = "Idempotency-Key"
)

// Bounds of the admission headers. Priority matches the ledger's clamp.
const (
	priorityMin         = -100
	priorityMax         = 100
	idempotencyKeyBytes = 255
)

// admission is what a request asks of the ledger beyond its tokens: its
// class, priority within the class, total deadline, and whether it may go
// to a fallback candidate.
type admission struct {
	Class      string
	Priority   int32
	DeadlineMs int64 // 0: none beyond the class's queue wait
	Fallback   bool
}

// parseAdmission reads X-Sluice-Class, X-Sluice-Priority,
// X-Sluice-Deadline-Ms and X-Sluice-Fallback, falling back to the key's
// defaults. A present but invalid header is a 400 naming the header: a
// caller who asked for something specific must not silently get the
// default instead.
func parseAdmission(h http.Header, id *config.Identity, hasClass func(string) bool) (admission, *apierr.Error) {
	a := admission{Class: id.Class, Priority: id.Priority, DeadlineMs: id.DeadlineMs, Fallback: id.FallbackAllowed}
	bad := func(header, msg string) (admission, *apierr.Error) {
		e := apierr.New(http.StatusBadRequest, apierr.CodeInvalidHeader, header+": "+msg)
		e.Param = header
		return admission{}, e
	}
	if v, ok := header(h, HeaderClass); ok {
		if !hasClass(v) {
			return bad(HeaderClass, "unknown traffic class "+strconv.Quote(clip(v)))
		}
		a.Class = v
	}
	if v, ok := header(h, HeaderPriority); ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < priorityMin || n > priorityMax {
			return bad(HeaderPriority, "want an integer in [-100, 100], got "+strconv.Quote(clip(v)))
		}
		a.Priority = int32(n)
	}
	if v, ok := header(h, HeaderDeadlineMs); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > config.DeadlineMsMax {
			return bad(HeaderDeadlineMs, "want milliseconds in [1, 86400000], got "+strconv.Quote(clip(v)))
		}
		a.DeadlineMs = n
	}
	if v, ok := header(h, HeaderFallback); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad(HeaderFallback, "want true or false, got "+strconv.Quote(clip(v)))
		}
		a.Fallback = a.Fallback && b // a key that forbids fallback cannot be overridden
	}
	return a, nil
}

// parseIdempotencyKey returns the Idempotency-Key header ("" when absent).
func parseIdempotencyKey(h http.Header) (string, *apierr.Error) {
	v, ok := header(h, HeaderIdempotency)
	if !ok {
		return "", nil
	}
	if len(v) > idempotencyKeyBytes {
		e := apierr.New(http.StatusBadRequest, apierr.CodeInvalidHeader, "Idempotency-Key: longer than 255 bytes")
		e.Param = HeaderIdempotency
		return "", e
	}
	return v, nil
}

// header returns the trimmed value of a header that is present and not
// blank.
func header(h http.Header, name string) (string, bool) {
	vs := h.Values(name)
	if len(vs) == 0 {
		return "", false
	}
	v := strings.TrimSpace(vs[0])
	return v, v != ""
}

// clip keeps echoed header values short in error messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
