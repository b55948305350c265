package ledgerd

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestHealthSteps: /healthz fails while the session is unusable, and while
// decided work has waited longer than the stall bound without a commit;
// an idle member is healthy however long ago it committed.
func TestHealthSteps(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	h := &Health{stallAfter: 10 * time.Second}
	for i, st := range []struct {
		do   func()
		at   float64
		want string // "" = live, else a part of the reason
	}{
		{func() {}, 0, ""},
		{func() { h.working(false, at(0)) }, 60, ""}, // idle for a minute
		{func() { h.working(true, at(61)) }, 65, ""},
		{func() { h.working(true, at(66)) }, 71, ""}, // still within the bound of the oldest work (61 s)
		{func() { h.failed(errors.New("end transaction: broker frozen")) }, 71.5, "without a commit"},
		{func() {}, 72, "broker frozen"},
		{func() { h.committed(at(73)) }, 73, ""},
		{func() { h.working(true, at(74)) }, 83, ""},
		{func() { h.setFatal(kerr.ProducerFenced) }, 83, "PRODUCER_FENCED"},
		{func() { h.setFatal(nil); h.committed(at(84)) }, 84, ""},
	} {
		st.do()
		err := h.Check(at(st.at))
		switch {
		case st.want == "" && err != nil:
			t.Errorf("step %d at %vs: %v, want live", i, st.at, err)
		case st.want != "" && (err == nil || !strings.Contains(err.Error(), st.want)):
			t.Errorf("step %d at %vs: %v, want a reason with %q", i, st.at, err, st.want)
		}
	}
}

// TestHealthzHTTP: 200 "ok" when live, 503 with the reason when not.
func TestHealthzHTTP(t *testing.T) {
	h := NewHealth()
	for _, tt := range []struct {
		fatal error
		code  int
		body  string
	}{{nil, http.StatusOK, "ok"}, {kerr.ProducerFenced, http.StatusServiceUnavailable, "PRODUCER_FENCED"}} {
		h.setFatal(tt.fatal)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("fatal %v: %d %q, want %d with %q", tt.fatal, rec.Code, rec.Body.String(), tt.code, tt.body)
		}
	}
}
