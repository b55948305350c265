package gateway

import "testing"

// TestIsErrorEvent: the stream events whose bytes are redacted of the
// gateway's credentials, and the content events that pass untouched.
func TestIsErrorEvent(t *testing.T) {
	tests := []struct {
		event, data string
		want        bool
	}{
		{"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, true}, // Anthropic
		{"", `{"error":{"message":"m","type":"server_error"}}`, true},                                  // OpenAI
		{"", ` { "error" : {"code": 500}}`, true},
		{"", `{"id":"c","object":"chat.completion.chunk","choices":[]}`, false},
		{"content_block_delta", `{"type":"content_block_delta","delta":{"text":"error"}}`, false},
		{"", `[DONE]`, false},
		{"", ``, false},
		{"", `{`, false},
	}
	for _, tt := range tests {
		if got := isErrorEvent([]byte(tt.event), []byte(tt.data)); got != tt.want {
			t.Errorf("isErrorEvent(%q, %q) = %v, want %v", tt.event, tt.data, got, tt.want)
		}
	}
}
