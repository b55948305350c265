package gateway

import (
	"math"
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
	// What the official OpenAI and Anthropic SDKs (Stainless-generated)
	// send on every request: their read timeout in seconds, as Python
	// prints a float ("600.0"; "60" for an int), and how many times they
	// have retried this request already ("0" first). Checked in
	// openai 3.57.0 and anthropic 2.14.0 (sdktest/requirements.txt),
	// _base_client.py _build_headers.
	HeaderSDKReadTimeout = "X-Stainless-Read-Timeout"
	HeaderSDKRetryCount  = "X-Stainless-Retry-Count"
)

// Bounds of the admission headers. Priority matches the ledger's clamp.
const (
	priorityMin         = -100
	priorityMax         = 100
	idempotencyKeyBytes = 255
	// sdkRetryCountMax bounds a recorded SDK retry count: a larger value
	// is not a real SDK's and is recorded as this.
	sdkRetryCountMax = 1000
)

// DeadlineFrom says where a request's deadline came from.
type DeadlineFrom string

// Deadline sources, in the order parseAdmission tries them.
const (
	DeadlineFromHeader DeadlineFrom = "header" // X-Sluice-Deadline-Ms
	DeadlineFromSDK    DeadlineFrom = "sdk"    // X-Stainless-Read-Timeout
	DeadlineFromKey    DeadlineFrom = "key"    // the key's deadline_ms
	DeadlineFromClass  DeadlineFrom = "class"  // the class's deadline_ms
	DeadlineFromNone   DeadlineFrom = "none"   // no deadline beyond the class's queue wait
)

// admission is what a request asks of the ledger beyond its tokens: its
// class, priority within the class, total deadline, and whether it may go
// to a fallback candidate.
type admission struct {
	Class      string
	Priority   int32
	DeadlineMs int64 // 0: none beyond the class's queue wait
	Fallback   bool
	// DeadlineFrom is where DeadlineMs came from; Capped: it was longer
	// than the key's or class's max_deadline_ms and was cut to it.
	DeadlineFrom DeadlineFrom
	Capped       bool
	// ClientRetryCount is the SDK's own retry count (X-Stainless-Retry-Count).
	ClientRetryCount int32
}

// classes is what parseAdmission needs of the config: which classes
// exist and their deadline policy (*config.Config).
type classes interface {
	HasClass(name string) bool
	ClassDeadline(name string) config.ClassDeadline
}

// parseAdmission reads X-Sluice-Class, X-Sluice-Priority,
// X-Sluice-Deadline-Ms and X-Sluice-Fallback, falling back to the key's
// defaults, and the official SDKs' X-Stainless-Read-Timeout and
// X-Stainless-Retry-Count. A present but invalid X-Sluice header is a 400
// naming the header: a caller who asked for something specific must not
// silently get the default instead. The SDK headers are not the caller's
// words to Sluice, so a malformed one is ignored.
//
// The deadline is the client's (docs/gateway.md, "Deadlines"): the first
// of X-Sluice-Deadline-Ms, the SDK's read timeout, the key's deadline_ms
// and the class's deadline_ms, then cut to the key's max_deadline_ms, or
// the class's when the key has none.
func parseAdmission(h http.Header, id *config.Identity, cls classes) (admission, *apierr.Error) {
	a := admission{Class: id.Class, Priority: id.Priority, Fallback: id.FallbackAllowed}
	bad := func(header, msg string) (admission, *apierr.Error) {
		e := apierr.New(http.StatusBadRequest, apierr.CodeInvalidHeader, header+": "+msg)
		e.Param = header
		return admission{}, e
	}
	if v, ok := header(h, HeaderClass); ok {
		if !cls.HasClass(v) {
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
	var declared int64
	if v, ok := header(h, HeaderDeadlineMs); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 || n > config.DeadlineMsMax {
			return bad(HeaderDeadlineMs, "want milliseconds in [1, 86400000], got "+strconv.Quote(clip(v)))
		}
		declared = n
	}
	a.DeadlineMs, a.DeadlineFrom, a.Capped = deadline(declared, sdkReadTimeoutMs(h), id, cls.ClassDeadline(a.Class))
	a.ClientRetryCount = sdkRetryCount(h)
	if v, ok := header(h, HeaderFallback); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad(HeaderFallback, "want true or false, got "+strconv.Quote(clip(v)))
		}
		a.Fallback = a.Fallback && b // a key that forbids fallback cannot be overridden
	}
	return a, nil
}

// deadline applies the precedence of parseAdmission to a request's
// declared deadline (X-Sluice-Deadline-Ms; 0: none) and its SDK's read
// timeout (0: none).
func deadline(declaredMs, sdkMs int64, id *config.Identity, cl config.ClassDeadline) (int64, DeadlineFrom, bool) {
	ms, from := int64(0), DeadlineFromNone
	switch {
	case declaredMs > 0:
		ms, from = declaredMs, DeadlineFromHeader
	case sdkMs > 0:
		ms, from = sdkMs, DeadlineFromSDK
	case id.DeadlineMs > 0:
		ms, from = id.DeadlineMs, DeadlineFromKey
	case cl.DefaultMs > 0:
		ms, from = cl.DefaultMs, DeadlineFromClass
	}
	capMs := id.MaxDeadlineMs
	if capMs == 0 {
		capMs = cl.MaxMs
	}
	if capMs > 0 && (ms == 0 || ms > capMs) {
		// A request with no deadline at all is capped too: the cap is
		// the longest the operator lets any request of the class live.
		return capMs, from, true
	}
	return ms, from, false
}

// sdkReadTimeoutMs is X-Stainless-Read-Timeout in milliseconds, rounded
// down, or 0 when absent, malformed, not positive or under 1 ms. A value
// beyond a day is cut to a day (config.DeadlineMsMax).
func sdkReadTimeoutMs(h http.Header) int64 {
	v, ok := header(h, HeaderSDKReadTimeout)
	if !ok {
		return 0
	}
	sec, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(sec) || sec <= 0 {
		return 0
	}
	if sec*1000 >= config.DeadlineMsMax {
		return config.DeadlineMsMax
	}
	return int64(sec * 1000)
}

// sdkRetryCount is X-Stainless-Retry-Count, or 0 when absent or malformed,
// at most sdkRetryCountMax.
func sdkRetryCount(h http.Header) int32 {
	v, ok := header(h, HeaderSDKRetryCount)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return int32(min(n, sdkRetryCountMax))
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
