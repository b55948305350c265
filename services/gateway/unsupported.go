package gateway

import (
	"fmt"
	"strings"
)

// unsupported is the message of the unsupported_api error: no candidate
// of the route can answer the request, and for each the adapter says
// exactly why (the API it does not speak, or what of the request the
// Gemini translation does not carry), so the client knows what to change.
func (c *call) unsupported() string {
	why := make([]string, 0, len(c.cands))
	for _, cd := range c.cands {
		why = append(why, fmt.Sprintf("provider %s: %s", cd.prov.Name, c.parsed.Unsupported(cd.prov.Kind)))
	}
	return fmt.Sprintf("model %q cannot be served on %s: %s", c.parsed.Request.Model, c.api.Path(), strings.Join(why, "; "))
}
