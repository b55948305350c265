package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/sluice-dev/sluice/admission/estimate"
)

// HeaderPromptFamily names the caller's prompt family; without it the
// gateway derives one from the system prompt and the tool definitions.
const HeaderPromptFamily = "X-Sluice-Prompt-Family"

// promptFamilyBytesMax bounds a caller-sent family (longer values are cut).
const promptFamilyBytesMax = 64

// promptFamily returns the request's prompt family for analytics
// (ReserveRequested.prompt_family): X-Sluice-Prompt-Family if the caller
// sent one, else "pf-" and the first 12 hex digits of a SHA-256 over the
// system prompt (Anthropic's top-level system, OpenAI's system and
// developer messages) and the tool definitions, in order. Requests that
// share both share a family, whatever the user turns say; a request with
// neither has family "". Stable across gateways and restarts.
func promptFamily(h http.Header, req *estimate.Request) string {
	if v, ok := header(h, HeaderPromptFamily); ok {
		if len(v) > promptFamilyBytesMax {
			v = v[:promptFamilyBytesMax]
		}
		return v
	}
	sum := sha256.New()
	n := 0
	part := func(kind string, s string) {
		sum.Write([]byte(kind))
		sum.Write([]byte{0})
		sum.Write([]byte(s))
		sum.Write([]byte{0})
		n++
	}
	for _, p := range req.System {
		part("system", p.Text)
	}
	for _, m := range req.Messages {
		if m.Role != "system" && m.Role != "developer" {
			continue
		}
		for _, p := range m.Parts {
			part(m.Role, p.Text)
		}
	}
	for _, t := range req.Tools {
		part("tool", t.Type+"\x00"+t.Name+"\x00"+t.Description+"\x00"+string(t.Parameters))
	}
	if n == 0 {
		return ""
	}
	return "pf-" + hex.EncodeToString(sum.Sum(nil)[:6])
}
