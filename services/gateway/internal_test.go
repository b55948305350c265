package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/sluice-dev/sluice/admission/apierr"
	"github.com/sluice-dev/sluice/admission/config"
)

const minimalYAML = `providers:
  - {name: p, kind: openai, scope: s, base_url: "http://127.0.0.1:1/v1"}
routes:
  - {model: m, provider: p}
tenants:
  - id: t
    keys:
      - {id: k, sha256: 0000000000000000000000000000000000000000000000000000000000000000, class: batch, priority: 3, deadline_ms: 900}
ledger:
  scopes:
    - name: s
      buckets:
        - {level: key, id: "*", dimension: requests, capacity: CAP}
`

func minimal(capacity string) string { return strings.Replace(minimalYAML, "CAP", capacity, 1) }

func mustLoad(t *testing.T, y string) *config.Config {
	t.Helper()
	c, err := config.Load(strings.NewReader(y))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseAdmission(t *testing.T) {
	cfg := mustLoad(t, minimal("600"))
	id := &config.Identity{Class: "batch", Priority: 3, DeadlineMs: 900, FallbackAllowed: true}
	noFallback := &config.Identity{Class: "batch", FallbackAllowed: false}
	adm := func(class string, prio int32, deadlineMs int64, fb bool, from DeadlineFrom) admission {
		return admission{Class: class, Priority: prio, DeadlineMs: deadlineMs, Fallback: fb, DeadlineFrom: from}
	}
	tests := []struct {
		name string
		id   *config.Identity
		hdr  map[string]string
		want admission
		bad  string // param of the expected error
	}{
		{"key defaults", id, nil, adm("batch", 3, 900, true, DeadlineFromKey), ""},
		{"all headers", id, map[string]string{HeaderClass: "agent", HeaderPriority: "-7", HeaderDeadlineMs: "2500", HeaderFallback: "false"}, adm("agent", -7, 2500, false, DeadlineFromHeader), ""},
		{"blank headers are absent", id, map[string]string{HeaderClass: "  ", HeaderPriority: ""}, adm("batch", 3, 900, true, DeadlineFromKey), ""},
		{"fallback true cannot override a key that forbids it", noFallback, map[string]string{HeaderFallback: "true"}, adm("batch", 0, 0, false, DeadlineFromNone), ""},
		{"unknown class", id, map[string]string{HeaderClass: "gold"}, admission{}, HeaderClass},
		{"priority too high", id, map[string]string{HeaderPriority: "101"}, admission{}, HeaderPriority},
		{"priority not a number", id, map[string]string{HeaderPriority: "high"}, admission{}, HeaderPriority},
		{"deadline zero", id, map[string]string{HeaderDeadlineMs: "0"}, admission{}, HeaderDeadlineMs},
		{"deadline over a day", id, map[string]string{HeaderDeadlineMs: "86400001"}, admission{}, HeaderDeadlineMs},
		{"fallback not a bool", id, map[string]string{HeaderFallback: "maybe"}, admission{}, HeaderFallback},
		{"SDK retry count is recorded", id, map[string]string{HeaderSDKRetryCount: "2"},
			admission{Class: "batch", Priority: 3, DeadlineMs: 900, Fallback: true, DeadlineFrom: DeadlineFromKey, ClientRetryCount: 2}, ""},
		{"a malformed SDK retry count is ignored", id, map[string]string{HeaderSDKRetryCount: "two"}, adm("batch", 3, 900, true, DeadlineFromKey), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.hdr {
				h.Set(k, v)
			}
			got, e := parseAdmission(h, tc.id, cfg)
			if tc.bad != "" {
				if e == nil || e.Param != tc.bad || e.Status != 400 || e.Code != "invalid_header" {
					t.Fatalf("got %+v, %+v; want a 400 on %s", got, e, tc.bad)
				}
				return
			}
			if e != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, e, tc.want)
			}
		})
	}
}

// deadlineYAML has classes with a deadline default and cap (interactive:
// 30 s default, 60 s cap; batch: 600 s default, no cap; agent: neither).
const deadlineYAML = `providers:
  - {name: p, kind: openai, scope: s, base_url: "http://127.0.0.1:1/v1"}
routes:
  - {model: m, provider: p}
ledger:
  default_class: interactive
  classes:
    - {name: interactive, age_offset_ms: 0, max_wait_ms: 300, max_depth: 10, deadline_ms: 30000, max_deadline_ms: 60000}
    - {name: agent, age_offset_ms: 2000, max_wait_ms: 10000, max_depth: 10}
    - {name: batch, age_offset_ms: 30000, max_wait_ms: 120000, max_depth: 10, deadline_ms: 600000}
  scopes:
    - name: s
      buckets:
        - {level: key, id: "*", dimension: requests, capacity: 600}
`

// TestDeadlinePrecedence: X-Sluice-Deadline-Ms, then the SDK's read
// timeout, then the key's deadline_ms, then the class's; always cut to the
// key's max_deadline_ms, or the class's when the key has none.
func TestDeadlinePrecedence(t *testing.T) {
	cfg := mustLoad(t, deadlineYAML)
	plain := &config.Identity{Class: "interactive"}
	keyed := &config.Identity{Class: "interactive", DeadlineMs: 45_000}
	keyCap := &config.Identity{Class: "interactive", DeadlineMs: 45_000, MaxDeadlineMs: 120_000}
	tests := []struct {
		name   string
		id     *config.Identity
		class  string // X-Sluice-Class ("" = the key's)
		sluice string // X-Sluice-Deadline-Ms
		sdk    string // X-Stainless-Read-Timeout
		wantMs int64
		from   DeadlineFrom
		capped bool
	}{
		{"class default", plain, "", "", "", 30_000, DeadlineFromClass, false},
		{"key default over the class's", keyed, "", "", "", 45_000, DeadlineFromKey, false},
		{"SDK read timeout over the key's", keyed, "", "", "20.0", 20_000, DeadlineFromSDK, false},
		{"SDK timeout as an int", plain, "", "", "7", 7_000, DeadlineFromSDK, false},
		{"SDK timeout with a fraction", plain, "", "", "1.2345", 1_234, DeadlineFromSDK, false},
		{"X-Sluice-Deadline-Ms over the SDK's", keyed, "", "5000", "20.0", 5_000, DeadlineFromHeader, false},
		{"the OpenAI SDK's 600 s default is cut to the class cap", plain, "", "", "600.0", 60_000, DeadlineFromSDK, true},
		{"X-Sluice-Deadline-Ms is cut to the class cap", plain, "", "90000", "", 60_000, DeadlineFromHeader, true},
		{"the key's cap replaces the class's", keyCap, "", "90000", "", 90_000, DeadlineFromHeader, false},
		{"the key's cap cuts too", keyCap, "", "", "600", 120_000, DeadlineFromSDK, true},
		{"the class header picks the class policy", plain, "batch", "", "", 600_000, DeadlineFromClass, false},
		{"no cap in batch: the SDK's 600 s stands", plain, "batch", "", "600.0", 600_000, DeadlineFromSDK, false},
		{"a class without policy and no header: none", plain, "agent", "", "", 0, DeadlineFromNone, false},
		{"no deadline at all still gets the cap", &config.Identity{Class: "agent", MaxDeadlineMs: 15_000}, "", "", "", 15_000, DeadlineFromNone, true},
		{"a malformed SDK timeout is ignored", plain, "", "", "soon", 30_000, DeadlineFromClass, false},
		{"a zero SDK timeout is ignored", plain, "", "", "0", 30_000, DeadlineFromClass, false},
		{"a negative SDK timeout is ignored", plain, "", "", "-3", 30_000, DeadlineFromClass, false},
		{"NaN is ignored", plain, "", "", "NaN", 30_000, DeadlineFromClass, false},
		{"an SDK timeout under 1 ms is ignored", plain, "", "", "0.0004", 30_000, DeadlineFromClass, false},
		{"an SDK timeout beyond a day is a day", &config.Identity{Class: "agent"}, "", "", "1e12", config.DeadlineMsMax, DeadlineFromSDK, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range map[string]string{HeaderClass: tc.class, HeaderDeadlineMs: tc.sluice, HeaderSDKReadTimeout: tc.sdk} {
				if v != "" {
					h.Set(k, v)
				}
			}
			got, e := parseAdmission(h, tc.id, cfg)
			if e != nil {
				t.Fatalf("error %+v", e)
			}
			if got.DeadlineMs != tc.wantMs || got.DeadlineFrom != tc.from || got.Capped != tc.capped {
				t.Errorf("deadline %d from %s capped %v; want %d from %s capped %v", got.DeadlineMs, got.DeadlineFrom, got.Capped, tc.wantMs, tc.from, tc.capped)
			}
		})
	}
}

// FuzzParseAdmission: any header values give either a 400 naming a header
// or an admission within the bounds the ledger accepts.
func FuzzParseAdmission(f *testing.F) {
	for _, s := range [][6]string{{"batch", "3", "100", "true", "600.0", "0"}, {"", "-100", "86400000", "0", "", ""}, {"x", "1e3", "-1", "yes", "1e400", "99999999999"}} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5])
	}
	cfg, err := config.Load(strings.NewReader(minimal("600")))
	if err != nil {
		f.Fatal(err)
	}
	id := &config.Identity{Class: "interactive", FallbackAllowed: true}
	f.Fuzz(func(t *testing.T, class, prio, deadline, fallback, sdkTimeout, sdkRetries string) {
		h := http.Header{}
		h[HeaderClass] = []string{class}
		h[HeaderPriority] = []string{prio}
		h[HeaderDeadlineMs] = []string{deadline}
		h[HeaderFallback] = []string{fallback}
		h[HeaderSDKReadTimeout] = []string{sdkTimeout}
		h[HeaderSDKRetryCount] = []string{sdkRetries}
		a, e := parseAdmission(h, id, cfg)
		if e != nil {
			if e.Status != 400 || !strings.HasPrefix(e.Param, "X-Sluice-") {
				t.Fatalf("error %+v", e)
			}
			return
		}
		if !cfg.HasClass(a.Class) || a.Priority < priorityMin || a.Priority > priorityMax || a.DeadlineMs < 0 || a.DeadlineMs > config.DeadlineMsMax ||
			a.ClientRetryCount < 0 || a.ClientRetryCount > sdkRetryCountMax {
			t.Fatalf("admission out of bounds: %+v", a)
		}
	})
}

func TestIdemStore(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	fpA, fpB := idemFingerprint("/v1/x", []byte("a")), idemFingerprint("/v1/x", []byte("b"))
	s := newIdemStore(config.Idempotency{WindowMs: 1000, EntriesMax: 2, BodyBytesMax: 4})
	type step struct {
		name     string
		key      string
		fp       [32]byte
		at       time.Duration
		want     idemState
		complete int // status to complete a fresh entry with (0: leave in flight)
		body     string
	}
	var entries = map[string]*idemEntry{}
	steps := []step{
		{"first sight", "k1", fpA, 0, idemFresh, 0, ""},
		{"repeat in flight", "k1", fpA, 10 * time.Millisecond, idemInFlight, 0, ""},
		{"other body", "k1", fpB, 20 * time.Millisecond, idemMismatch, 0, ""},
		{"second key, completes", "k2", fpA, 30 * time.Millisecond, idemFresh, 200, "ok"},
		{"replay", "k2", fpA, 40 * time.Millisecond, idemReplay, 0, ""},
		{"refusals are forgotten", "k3", fpA, 50 * time.Millisecond, idemFresh, 429, "no"},
		{"k3 runs again (evicts k1, the oldest)", "k3", fpA, 60 * time.Millisecond, idemFresh, 200, "too-long"},
		{"response too large to keep", "k3", fpA, 70 * time.Millisecond, idemTooLarge, 0, ""},
		{"k1 was evicted", "k1", fpA, 80 * time.Millisecond, idemFresh, 0, ""},
		{"window passed", "k1", fpB, 2 * time.Second, idemFresh, 0, ""},
	}
	for _, st := range steps {
		e, got := s.begin(st.key, st.fp, t0.Add(st.at))
		if got != st.want {
			t.Fatalf("step %q: state %d, want %d", st.name, got, st.want)
		}
		if got == idemFresh {
			entries[st.key] = e
			if st.complete != 0 {
				s.complete(e, st.complete, http.Header{}, []byte(st.body), false)
			}
		}
		if n := s.len(); n > 2 {
			t.Fatalf("step %q: %d entries, bound is 2", st.name, n)
		}
	}
}

func TestReloader(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(minimal("600"))
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	srv := New(mustLoad(t, minimal("600")), nil, log)
	var published [][]byte
	publishErr := error(nil)
	r := NewReloader(path, srv, func(_ context.Context, b []byte, _ string) error {
		if publishErr != nil {
			return publishErr
		}
		published = append(published, b)
		return nil
	}, log)
	tests := []struct {
		name       string
		file       string
		publishErr error
		wantErr    bool
		wantCap    string // the running config's bucket capacity afterwards
		published  int
	}{
		{"invalid YAML keeps the running config", "providers: [", nil, true, "600", 0},
		{"validation error keeps it too", minimal("-1"), nil, true, "600", 0},
		{"a failed publish keeps it", minimal("1200"), errors.New("broker down"), true, "600", 0},
		{"good reload publishes ConfigChanged and swaps", minimal("1800"), nil, false, "1800", 1},
		{"same ledger section: no new ConfigChanged", minimal("1800"), nil, false, "1800", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			write(tc.file)
			publishErr = tc.publishErr
			logs.Reset()
			err := r.Reload(context.Background())
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && !strings.Contains(logs.String(), "keeping the running config") {
				t.Errorf("refusal not logged: %s", logs.String())
			}
			if got := string(srv.Config().LedgerJSON()); !strings.Contains(got, `"capacity":`+tc.wantCap+`,`) {
				t.Errorf("running ledger section %s, want capacity %s", got, tc.wantCap)
			}
			if len(published) != tc.published {
				t.Errorf("%d ConfigChanged published, want %d", len(published), tc.published)
			}
		})
	}
}

// TestReadUpstream checks that readUpstream reads what
// io.ReadAll(io.LimitReader(r, limit)) reads, whatever the Content-Length
// claims.
func TestReadUpstream(t *testing.T) {
	body := strings.Repeat("0123456789", 100)
	for _, tc := range []struct {
		name        string
		size, limit int64
	}{
		{"exact", 1000, 1 << 20}, {"unknown", -1, 1 << 20}, {"short claim", 10, 1 << 20},
		{"long claim", 5000, 1 << 20}, {"zero claim", 0, 1 << 20}, {"over the hint", 2 << 20, 4 << 20},
		{"limit below body", 1000, 300}, {"limit below claim", 5000, 999}, {"limit at body", 1000, 1000},
		{"limit zero", 1000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, _ := io.ReadAll(io.LimitReader(iotest.OneByteReader(strings.NewReader(body)), tc.limit))
			got, err := readUpstream(iotest.HalfReader(strings.NewReader(body)), tc.size, tc.limit)
			if err != nil || string(got) != string(want) {
				t.Fatalf("readUpstream = %d bytes, %v; want %d bytes", len(got), err, len(want))
			}
		})
	}
	boom := errors.New("boom")
	if _, err := readUpstream(iotest.ErrReader(boom), 10, 100); !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
}

// TestReadBody checks that readBody reads the whole body, or answers the
// body limit's 413, whatever the declared Content-Length says: declared
// (read into one buffer of that size), chunked (-1), lying either way,
// and declared over the limit or over the size hint (io.ReadAll).
func TestReadBody(t *testing.T) {
	const limit = 1000
	for _, tc := range []struct {
		name     string
		body     int   // bytes sent
		declared int64 // Content-Length; -1 = chunked
		limit    int64
		status   int // 0: read whole
	}{
		{"declared", 700, 700, limit, 0},
		{"declared at the limit", limit, limit, limit, 0},
		{"empty", 0, 0, limit, 0},
		{"chunked", 700, -1, limit, 0},
		{"short claim", 700, 10, limit, 0},
		{"long claim", 700, 900, limit, 0},
		{"declared over the hint", 1<<20 + 10, 1<<20 + 10, 2 << 20, 0},
		{"declared over the limit", 1500, 1500, limit, http.StatusRequestEntityTooLarge},
		{"chunked over the limit", 1500, -1, limit, http.StatusRequestEntityTooLarge},
		{"short claim over the limit", 1500, 100, limit, http.StatusRequestEntityTooLarge},
		{"one byte over", limit + 1, limit + 1, limit, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Repeat("x", tc.body)
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", iotest.HalfReader(strings.NewReader(body)))
			r.ContentLength = tc.declared
			got, e := readBody(httptest.NewRecorder(), r, tc.limit)
			switch {
			case tc.status == 0 && (e != nil || string(got) != body):
				t.Fatalf("readBody = %d bytes, %v; want the %d bytes sent", len(got), e, tc.body)
			case tc.status != 0 && (e == nil || e.Status != tc.status || e.Code != apierr.CodeBodyTooLarge):
				t.Fatalf("readBody = %d bytes, %+v; want %d %s", len(got), e, tc.status, apierr.CodeBodyTooLarge)
			case tc.status != 0 && !strings.Contains(e.Message, fmt.Sprintf("exceeds the %d-byte limit", tc.limit)):
				t.Fatalf("413 says %q; want it to name the %d-byte limit", e.Message, tc.limit)
			}
		})
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", iotest.ErrReader(errors.New("boom")))
	r.ContentLength = 100
	if _, e := readBody(httptest.NewRecorder(), r, limit); e == nil || e.Status != http.StatusBadRequest {
		t.Fatalf("a failing body read gave %+v, want a 400", e)
	}
}

// TestSluiceHeadersCanonical checks the keys setSluiceHeaders stores
// without Set's canonicalization.
func TestSluiceHeadersCanonical(t *testing.T) {
	for _, k := range []string{HeaderRequestID, HeaderQueueMs, HeaderAttempts} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("header %q is not canonical (%q)", k, c)
		}
	}
}
