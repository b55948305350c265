package httpmux

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestAllowed(t *testing.T) {
	mux := http.NewServeMux()
	ok := func(http.ResponseWriter, *http.Request) {}
	mux.HandleFunc("POST /v1/chat/completions", ok)
	mux.HandleFunc("GET /v1/models/{id...}", ok)
	mux.HandleFunc("POST /a/{x}/pause", ok)
	mux.HandleFunc("PUT /a/{x}/limits", ok)
	mux.HandleFunc("DELETE /a/{x}", ok)
	mux.HandleFunc("GET /a/{x}", ok)
	for _, c := range []struct {
		method, path string
		want         []string
	}{
		{"GET", "/v1/chat/completions", []string{"POST"}},
		{"POST", "/v1/chat/completions", nil}, // routed: nothing else to offer
		{"POST", "/v1/models/gpt-4o", []string{"GET", "HEAD"}},
		{"POST", "/a/shop", []string{"GET", "HEAD", "DELETE"}},
		{"GET", "/a/shop/pause", []string{"POST"}},
		{"GET", "/nowhere", nil},
		{"GET", "/a/shop/unknown", nil},
	} {
		got := Allowed(mux, httptest.NewRequest(c.method, c.path, nil))
		if !slices.Equal(got, c.want) {
			t.Errorf("%s %s: %v, want %v", c.method, c.path, got, c.want)
		}
	}
}

// TestBearerToken: the scheme is matched case-insensitively (RFC 9110
// §11.1); other schemes and empty tokens are not bearer tokens.
func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		in, tok string
		ok      bool
	}{
		{"Bearer sk-1", "sk-1", true},
		{"bearer sk-1", "sk-1", true},
		{"BEARER   sk-1 ", "sk-1", true},
		{"Basic dXNlcg==", "", false},
		{"Bearer", "", false},
		{"Bearer   ", "", false},
		{"Bearersk-1", "", false},
		{"", "", false},
	} {
		tok, ok := BearerToken(tc.in)
		if tok != tc.tok || ok != tc.ok {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", tc.in, tok, ok, tc.tok, tc.ok)
		}
	}
}

// FuzzBearerToken: whatever the header, a token found has no surrounding
// space and came after a scheme that is "bearer" in any case.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer sk-1", "bearer  x", "Basic a", "", "Bearer", " BEARER\tx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, ok := BearerToken(h)
		if !ok {
			if tok != "" {
				t.Fatalf("not ok but token %q", tok)
			}
			return
		}
		if tok == "" || strings.TrimSpace(tok) != tok {
			t.Fatalf("token %q of %q", tok, h)
		}
		scheme, _, _ := strings.Cut(strings.TrimSpace(h), " ")
		if !strings.EqualFold(scheme, "bearer") {
			t.Fatalf("scheme %q accepted in %q", scheme, h)
		}
	})
}
