package provider

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/admission/config"
	"github.com/sluice-dev/sluice/schemas"
)

// Keys of no shape ScrubMessage knows: 32 letters and digits with no sk-
// prefix, too short for its long-token rule, not hex.
const (
	plainKeyA  = "Q7wErTy2UiOp9AsDfGh3JkLzXcVbNm4q"
	plainKeyB  = "zz91PlainKeyOfProviderBxxYYzz00ww"
	plainCliKy = "cliKey42ForTenantAlphaQQrrSS77tt"
)

// secretProviders loads two providers with the plain keys.
func secretProviders(t testing.TB) *config.Config {
	t.Helper()
	t.Setenv("SLUICE_REDACT_KEY_A", plainKeyA)
	t.Setenv("SLUICE_REDACT_KEY_B", plainKeyB)
	return loadProviders(t,
		`{name: a, kind: openai, scope: s, base_url: "http://127.0.0.1:1/v1", api_key_env: SLUICE_REDACT_KEY_A}`,
		`{name: b, kind: anthropic, scope: s, base_url: "http://127.0.0.1:1/v1", api_key_env: SLUICE_REDACT_KEY_B}`,
		`{name: nokey, kind: openai_compatible, scope: s, base_url: "http://127.0.0.1:1/v1"}`)
}

// TestScrubMessageMissesPlainKeys is why Secrets exists: the pattern
// scrubber lets a plain 32-character key through.
func TestScrubMessageMissesPlainKeys(t *testing.T) {
	for _, k := range []string{plainKeyA, plainKeyB, plainCliKy} {
		if got := ScrubMessage("Incorrect API key provided: " + k + "."); !strings.Contains(got, k) {
			t.Errorf("ScrubMessage now redacts %s (%q): the literal redaction is still needed for other shapes, but this test's keys must change", k, got)
		}
	}
}

func TestSecretsRedact(t *testing.T) {
	cfg := secretProviders(t)
	sec := SecretsOf(cfg, plainCliKy)
	tests := []struct {
		name string
		sec  Secrets
		in   string
		want string
	}{
		{"none", sec, "Rate limit reached. Please try again in 1s.", "Rate limit reached. Please try again in 1s."},
		{"empty", sec, "", ""},
		{"provider key", sec, "Incorrect API key provided: " + plainKeyA + ".", "Incorrect API key provided: [REDACTED]."},
		{"other provider's key", sec, "key " + plainKeyB, "key [REDACTED]"},
		{"client key", sec, plainCliKy + " is not valid", "[REDACTED] is not valid"},
		{"every occurrence", sec, plainKeyA + "/" + plainKeyA + "/" + plainCliKy, "[REDACTED]/[REDACTED]/[REDACTED]"},
		{"glued", sec, "x" + plainKeyA + plainKeyB + "y", "x[REDACTED][REDACTED]y"},
		{"short client key is no secret", SecretsOf(cfg, "test"), "test key test", "test key test"},
		{"client key holding a provider key goes whole", SecretsOf(cfg, "pre"+plainKeyA+"post"), "k=pre" + plainKeyA + "post!", "k=[REDACTED]!"},
		{"zero value", Secrets{}, "key " + plainKeyA, "key " + plainKeyA},
		{"secret inside the marker cannot loop", Secrets{Client: "[REDACTE"}, "[REDACTE", "[REDACTED]"},
	}
	for _, tt := range tests {
		if got := tt.sec.Redact(tt.in); got != tt.want {
			t.Errorf("%s: Redact(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

// TestSecretsWindow: a cut never leaves the head of a secret.
func TestSecretsWindow(t *testing.T) {
	sec := Secrets{Client: plainCliKy}
	pad := strings.Repeat("a", 20)
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"short", "key " + plainCliKy, 100, "key [REDACTED]"},
		{"cut through the key: redacted before the cut", pad + plainCliKy, 30, pad + "[REDACTED]"},
		{"cut through the key, marker cut too", pad + plainCliKy, 25, pad + "[REDA"},
		{"cut after the key", pad + plainCliKy + "zzzzzzzz", 60, pad + "[REDACTED]zzzzzzzz"},
		{"head of a key cut by the window, pulled in by shrinking", strings.Repeat(plainCliKy, 3) + "bbb" + plainCliKy, 40, "[REDACTED][REDACTED]"},
		{"cut, no key near", strings.Repeat("b", 50), 10, strings.Repeat("b", 10)},
	}
	for _, tt := range tests {
		got := sec.Window(tt.in, tt.n)
		if got != tt.want {
			t.Errorf("%s: Window(%q, %d) = %q, want %q", tt.name, tt.in, tt.n, got, tt.want)
		}
		if len(got) > tt.n {
			t.Errorf("%s: %d bytes > %d", tt.name, len(got), tt.n)
		}
	}
}

// TestParseRejectionRedactsEchoedKeys: a provider that echoes a key of no
// known shape, in its message, a raw body or its request id, hands it to
// nobody.
func TestParseRejectionRedactsEchoedKeys(t *testing.T) {
	cfg := secretProviders(t)
	sec := SecretsOf(cfg, plainCliKy)
	longPad := strings.Repeat("x ", MaxMessageBytes-5) // the key straddles ScrubMessage's window
	tests := []struct {
		name   string
		kind   Kind
		status int
		hdr    map[string]string
		body   string
	}{
		{"openai 401 message", schemas.ProviderOpenAI, 401, nil, `{"error":{"message":"Incorrect API key provided: ` + plainKeyA + `. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}`},
		{"anthropic 429 message", schemas.ProviderAnthropic, 429, nil, `{"type":"error","error":{"type":"rate_limit_error","message":"limit for key ` + plainKeyB + ` reached"},"request_id":"req_1"}`},
		{"client key in a 400", schemas.ProviderOpenAI, 400, nil, `{"error":{"message":"bad header Authorization: ` + plainCliKy + `"}}`},
		{"raw body", schemas.ProviderOpenAI, 502, nil, "<html>upstream said key=" + plainKeyA + "</html>"},
		{"raw body, key across the window", schemas.ProviderOpenAI, 502, nil, longPad + plainKeyA + " tail"},
		{"json message, key across the window", schemas.ProviderOpenAI, 429, nil, `{"error":{"message":"` + longPad + plainKeyA + `"}}`},
		{"request id", schemas.ProviderOpenAI, 429, map[string]string{"X-Request-Id": "id-" + plainKeyA}, `{"error":{"message":"slow down"}}`},
		{"request id in the body", schemas.ProviderAnthropic, 429, nil, `{"type":"error","error":{"type":"rate_limit_error","message":"m"},"request_id":"` + plainCliKy + `"}`},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.hdr {
			h.Set(k, v)
		}
		r, ok := ParseRejection(tt.kind, tt.status, h, []byte(tt.body), testNow, sec)
		if !ok {
			t.Errorf("%s: not a rejection", tt.name)
			continue
		}
		for _, k := range []string{plainKeyA, plainKeyB, plainCliKy} {
			for _, head := range []string{k, k[:SecretMinBytes]} {
				if strings.Contains(r.Message, head) || strings.Contains(r.ProviderRequestID, head) {
					t.Errorf("%s: %q of a key is in message %q / request id %q", tt.name, head, r.Message, r.ProviderRequestID)
				}
			}
		}
		if !strings.Contains(r.Message+r.ProviderRequestID, "[REDACTED]") && !strings.Contains(tt.name, "across the window") {
			t.Errorf("%s: nothing redacted in %q / %q", tt.name, r.Message, r.ProviderRequestID)
		}
	}
}

// TestSecretsRedactAllocs: the request path pays nothing when no secret
// occurs.
func TestSecretsRedactAllocs(t *testing.T) {
	sec := SecretsOf(secretProviders(t), plainCliKy)
	msg := "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s."
	if n := testing.AllocsPerRun(100, func() { _ = sec.Redact(msg) }); n != 0 {
		t.Errorf("Redact with no match: %v allocs, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = SecretsOf(nil, plainCliKy) }); n != 0 {
		t.Errorf("SecretsOf: %v allocs, want 0", n)
	}
}

func BenchmarkSecretsRedact(b *testing.B) {
	sec := SecretsOf(secretProviders(b), plainCliKy)
	for _, bc := range []struct{ name, msg string }{
		{"miss", "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s."},
		{"hit", "Incorrect API key provided: " + plainKeyA + ". You can find your API key at https://platform.openai.com/account/api-keys."},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = sec.Redact(bc.msg)
			}
		})
	}
}

// FuzzSecretsWindow: whatever the text and the key, the window holds no
// whole key, no head of one at its end, and fits its bound.
func FuzzSecretsWindow(f *testing.F) {
	f.Add("aaaa"+plainCliKy+"bbbb", plainCliKy, 10)
	f.Add(strings.Repeat(plainCliKy, 4), plainCliKy, 50)
	f.Add("xx[REDACTED]", "[REDACTE", 5)
	f.Fuzz(func(t *testing.T, s, key string, n int) {
		if n < 0 || n > 1<<16 || len(key) > 256 {
			return
		}
		sec := Secrets{Client: key}
		got := sec.Window(s, n)
		if len(got) > max(n, len(sec.Redact(s))) {
			t.Fatalf("Window(%q, %d) = %q: over the bound", s, n, got)
		}
		// A key made of the marker's brackets can be re-created by its
		// own replacement; no credential is.
		if len(key) >= SecretMinBytes && !strings.ContainsAny(key, "[]") && !strings.Contains(redacted, key) && strings.Contains(got, key) {
			t.Fatalf("Window(%q, %d) = %q holds the key %q", s, n, got, key)
		}
	})
}
