package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// Token approximation (the real tokenizer lives in the gateway):
//
//	input tokens = ceil(text bytes / 4) + PromptOverheadTokens + PerMessageOverheadTokens × entries
//
// where "text bytes" is the sum of the byte lengths of every JSON string value
// inside the prompt-bearing fields (OpenAI messages and tools; Anthropic
// system, tools and messages; Gemini contents, systemInstruction and tools),
// and "entries" is the number of messages (OpenAI, Anthropic) or contents
// (Gemini). Embedding inputs are ceil(bytes/4) per string, or the array
// length for pre-tokenized inputs, with no overhead.

func ceilDiv4(n int64) int64 { return (n + 3) / 4 }

// stringBytes sums the byte lengths of all string values in v.
func stringBytes(v any) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x))
	case []any:
		var n int64
		for _, e := range x {
			n += stringBytes(e)
		}
		return n
	case map[string]any:
		var n int64
		for _, e := range x {
			n += stringBytes(e)
		}
		return n
	}
	return 0
}

func (s *Server) estimateInput(bytes, entries int64) int64 {
	return ceilDiv4(bytes) + s.cfg.PromptOverheadTokens + s.cfg.PerMessageOverheadTokens*entries
}

// anthropicPrompt is the token split of an Anthropic request: the cacheable
// prefix is everything (tools → system → messages, in that order) up to and
// including the last block carrying "cache_control".
type anthropicPrompt struct {
	total     int64  // all input tokens
	prefix    int64  // tokens of the cacheable prefix (0 = no cache_control)
	prefixKey string // hash of the prefix
}

func (s *Server) anthropicTokens(model string, body map[string]any) anthropicPrompt {
	type seg struct {
		v  any
		cc bool
	}
	var segs []seg
	add := func(v any) {
		m, _ := v.(map[string]any)
		_, cc := m["cache_control"]
		segs = append(segs, seg{v: v, cc: cc})
	}
	if tools, ok := body["tools"].([]any); ok {
		for _, t := range tools {
			add(t)
		}
	}
	switch sys := body["system"].(type) {
	case string:
		add(sys)
	case []any:
		for _, b := range sys {
			add(b)
		}
	}
	msgs, _ := body["messages"].([]any)
	var roleBytes int64
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		roleBytes += stringBytes(mm["role"])
		switch c := mm["content"].(type) {
		case []any:
			for _, b := range c {
				add(b)
			}
		default:
			add(c)
		}
	}
	all, pre := roleBytes, int64(0)
	last := -1
	for i, sg := range segs {
		if sg.cc {
			last = i
		}
	}
	h := sha256.New()
	h.Write([]byte(model))
	for i, sg := range segs {
		n := stringBytes(sg.v)
		all += n
		if i <= last {
			pre += n
			b, _ := json.Marshal(sg.v)
			h.Write(b)
		}
	}
	p := anthropicPrompt{total: s.estimateInput(all, int64(len(msgs)))}
	if last >= 0 {
		p.prefix = min(ceilDiv4(pre), p.total)
		p.prefixKey = hex.EncodeToString(h.Sum(nil))
	}
	return p
}

// words used to build output text: each is 3 letters + a space = 4 bytes,
// so the text of N output tokens is 4N bytes, consistent with the estimate.
var words = []string{"the ", "sim ", "ran ", "and ", "got ", "few ", "big ", "new ", "old ", "fox ", "jar ", "map "}

func outputText(from, n int64) string {
	var b strings.Builder
	b.Grow(int(n) * 4)
	for i := from; i < from+n; i++ {
		b.WriteString(words[i%int64(len(words))])
	}
	return b.String()
}

// chunks splits n output tokens into stream chunks of size k.
func chunks(n int64, k int) []int64 {
	if k <= 0 {
		k = 4
	}
	var out []int64
	for n > 0 {
		c := min(n, int64(k))
		out = append(out, c)
		n -= c
	}
	return out
}
