// Package estimate computes Sluice's pre-flight token estimate for a request:
// input tokens from the prompt, tools and schemas (tiktoken encodings for
// OpenAI models, a documented approximation for Claude, Gemini and unknown
// models), plus the output tokens to reserve. See README.md.
package estimate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	_ "image/gif" // register decoders for image.DecodeConfig
	_ "image/jpeg"
	_ "image/png"
	"math"
	"strconv"
	"strings"
	"sync"
)

// Defaults of Options.
const (
	DefaultOutputTokens = 4096
	DefaultApproxFactor = 1.15
)

// Per-message and per-tool overheads (OpenAI cookbook "How to count tokens
// with tiktoken": 3 tokens per message, +1 for a name, +3 to prime the reply).
const (
	tokensPerMessage    = 3
	tokensPerName       = 1
	tokensReplyPriming  = 3
	tokensPerToolCall   = 3
	tokensToolsPreamble = 12  // OpenAI: the tools/functions namespace header
	tokensPerTool       = 8   // per tool definition beyond its name, description and schema
	tokensClaudeToolSys = 346 // Anthropic: tool-use system prompt (tool_choice auto/none)
	tokensResponseFmt   = 10
	tokensDocument      = 3000 // file / PDF part of unknown size
	tokensAudio         = 1000 // audio part of unknown length
)

// Options configure an Estimator. Zero values take the defaults.
type Options struct {
	// DefaultOutputTokens is the conservative output reservation used in the
	// minimum with max_tokens and the route's p95 (default 4096).
	DefaultOutputTokens int64
	// ApproxFactor multiplies cl100k_base counts for models whose tokenizer
	// is not public (Claude, Gemini, unknown models); default 1.15.
	ApproxFactor float64
	// OutputCaps adds or overrides per-model output caps, keyed by model
	// name prefix (longest prefix wins).
	OutputCaps map[string]int64
	// Learn configures the online p95-output learner (learn.go).
	Learn LearnOptions
}

// Estimate is the pre-flight estimate of one request attempt.
type Estimate struct {
	InputTokens       int64 // prompt tokens, including any cached prefix
	CachedInputTokens int64 // cache reads known in advance (0: unknown)
	OutputTokens      int64 // output tokens to reserve
	// MaxTokens repeats the request's max output (0 if unset); some
	// providers (Azure OpenAI) charge it against their token limit up front.
	MaxTokens int64
	// ArrivalOutputTokens is the output such a provider charges when the
	// request arrives: MaxTokens for each of the n choices (0 if unset).
	ArrivalOutputTokens int64

	Streaming bool
	Encoding  string // tokenizer used, e.g. "o200k_base" or "cl100k_base*1.15"
	// Approximate is true when the count is not exact tokenizer output for
	// the model: approximated tokenizers (Claude, Gemini, unknown), images,
	// documents, audio, or tool definitions.
	Approximate bool
}

// Estimator computes estimates. It is safe for concurrent use.
type Estimator struct {
	defaultOut int64
	factor     float64
	caps       []modelCap // sorted longest prefix first
	encSuffix  string
	learned    *OutputLearner
}

type modelCap struct {
	prefix string
	cap    int64
}

// builtinOutputCaps are the models' documented maximum output tokens.
var builtinOutputCaps = map[string]int64{
	"gpt-4o": 16384, "chatgpt-4o": 16384, "gpt-4.1": 32768, "gpt-4.5": 16384,
	"gpt-5": 128000, "o1": 100000, "o1-mini": 65536, "o3": 100000, "o4-mini": 100000,
	"gpt-4": 8192, "gpt-4-turbo": 4096, "gpt-3.5": 4096, "gpt-35": 4096,
	"claude-3-haiku": 4096, "claude-3-opus": 4096, "claude-3-sonnet": 4096,
	"claude-3-5": 8192, "claude-3-7": 64000, "claude-sonnet-4": 64000,
	"claude-opus-4": 32000, "claude-haiku-4": 64000,
	"gemini-1.5": 8192, "gemini-2.0": 8192, "gemini-2.5": 65536,
}

// New returns an Estimator. Encodings load lazily, once per process; call
// Preload at start-up to pay that cost (≈0.2 s) before the first request.
func New(opts Options) *Estimator {
	e := &Estimator{defaultOut: opts.DefaultOutputTokens, factor: opts.ApproxFactor, learned: NewOutputLearner(opts.Learn)}
	if e.defaultOut <= 0 {
		e.defaultOut = DefaultOutputTokens
	}
	if e.factor <= 0 || math.IsNaN(e.factor) || math.IsInf(e.factor, 0) {
		e.factor = DefaultApproxFactor
	}
	caps := map[string]int64{}
	for k, v := range builtinOutputCaps {
		caps[k] = v
	}
	for k, v := range opts.OutputCaps {
		caps[strings.ToLower(k)] = v
	}
	for k, v := range caps {
		if v > 0 {
			e.caps = append(e.caps, modelCap{k, v})
		}
	}
	// longest prefix first; ties by name for determinism
	for i := 1; i < len(e.caps); i++ {
		for j := i; j > 0 && capBefore(e.caps[j], e.caps[j-1]); j-- {
			e.caps[j], e.caps[j-1] = e.caps[j-1], e.caps[j]
		}
	}
	e.encSuffix = "*" + strconv.FormatFloat(e.factor, 'f', -1, 64)
	return e
}

func capBefore(a, b modelCap) bool {
	if len(a.prefix) != len(b.prefix) {
		return len(a.prefix) > len(b.prefix)
	}
	return a.prefix < b.prefix
}

// Preload loads both encodings now.
func (e *Estimator) Preload() error {
	for _, n := range []string{EncodingO200k, EncodingCL100k} {
		if _, err := getEncoding(n); err != nil {
			return err
		}
	}
	return nil
}

// family of a model name.
type family int

const (
	famOpenAI family = iota // exact tiktoken encoding
	famClaude
	famGemini
	famOther
)

// normalizeModel lower-cases a model name and drops routing prefixes such as
// "openai/", "models/" or Bedrock's "anthropic.".
func normalizeModel(model string) string {
	m := strings.ToLower(strings.TrimSpace(model))
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	return m
}

// EncodingForModel returns the tiktoken encoding used for model and whether
// the count is exact for it (false: approximation with cl100k_base).
func EncodingForModel(model string) (encoding string, exact bool) {
	enc, fam := classify(normalizeModel(model))
	return enc, fam == famOpenAI
}

func classify(m string) (string, family) {
	for _, p := range []string{"gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss", "omni-moderation"} {
		if strings.HasPrefix(m, p) {
			return EncodingO200k, famOpenAI
		}
	}
	for _, p := range []string{"gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada-002"} {
		if strings.HasPrefix(m, p) {
			return EncodingCL100k, famOpenAI
		}
	}
	switch {
	case strings.Contains(m, "claude"):
		return EncodingCL100k, famClaude
	case strings.HasPrefix(m, "gemini") || strings.HasPrefix(m, "gemma"):
		return EncodingCL100k, famGemini
	}
	return EncodingCL100k, famOther
}

// counter counts text tokens with one encoding, falling back to a bytes/3
// bound if the encoding could not be loaded (it is embedded, so this is a
// safety net, flagged Approximate).
type counter struct {
	enc      *bpeEncoding
	fallback bool
}

func (c *counter) count(s string) int64 {
	if s == "" {
		return 0
	}
	if c.enc == nil {
		c.fallback = true
		return int64(len(s)+2) / 3
	}
	return int64(c.enc.Count(s))
}

var compactPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// countJSON counts a JSON value in compact form (pretty-printing whitespace
// in a schema is not what the model sees).
func (c *counter) countJSON(raw json.RawMessage) int64 {
	if len(raw) == 0 {
		return 0
	}
	buf := compactPool.Get().(*bytes.Buffer)
	defer compactPool.Put(buf)
	buf.Reset()
	if err := json.Compact(buf, raw); err != nil {
		return c.count(string(raw))
	}
	return c.count(buf.String())
}

// Bounds of an input correction factor: the same as a calibration patch
// may carry (analytics/report ParsePatch), which itself moves a route's
// factor by at most ±10 % per report.
const (
	InputCorrectionMin = 0.5
	InputCorrectionMax = 2.0
)

// Route is what the estimator knows of a request's route beyond the
// request itself.
type Route struct {
	// P95Output is the route's p95 of output tokens (calibrated, learned,
	// or the route's default reservation); 0 = unknown.
	P95Output int64
	// InputCorrection multiplies the input-token count (0 or 1 = none); it
	// is clamped to [InputCorrectionMin, InputCorrectionMax].
	InputCorrection float64
}

// ObserveOutput feeds one complete answer's actual output tokens on route
// to the online learner (LearnedP95).
func (e *Estimator) ObserveOutput(route string, outputTokens int64) {
	e.learned.Observe(route, outputTokens)
}

// LearnedP95 is the route's p95 output learned from ObserveOutput, and
// false until it has enough samples. It is not applied by Estimate on its
// own: the caller decides where it may lower a reservation (README.md,
// "Online learning").
func (e *Estimator) LearnedP95(route string) (int64, bool) { return e.learned.P95(route) }

// Learner returns the estimator's online learner.
func (e *Estimator) Learner() *OutputLearner { return e.learned }

// Estimate computes the estimate for req. routeP95Output is the route's
// observed p95 of output tokens (0: unknown).
func (e *Estimator) Estimate(req Request, routeP95Output int64) Estimate {
	return e.EstimateRoute(req, Route{P95Output: routeP95Output})
}

// EstimateRoute computes the estimate for req on a route: the output
// reservation is capped by rt.P95Output, and the input count multiplied by
// the route's bounded input correction (rounded up).
func (e *Estimator) EstimateRoute(req Request, rt Route) Estimate {
	routeP95Output := rt.P95Output
	model := normalizeModel(req.Model)
	encName, fam := classify(model)
	enc, _ := getEncoding(encName)
	c := &counter{enc: enc}
	out := Estimate{Streaming: req.Stream, Encoding: encName, MaxTokens: req.MaxTokens}
	if fam != famOpenAI {
		out.Encoding = encName + e.encSuffix
		out.Approximate = true
	}

	var text, media int64 // media: images etc., not scaled by the factor
	approx := false

	if req.Format == FormatEmbeddings || req.Format == FormatOpenAICompletions {
		// Raw text, no chat framing: embeddings inputs, legacy prompts.
		for _, s := range req.Input {
			text += c.count(s)
		}
		text += req.InputTokens
	} else {
		text, media, approx = e.chatTokens(c, fam, model, &req)
	}
	if fam != famOpenAI {
		text = int64(math.Ceil(float64(text) * e.factor))
	}
	out.InputTokens = text + media
	if f := ClampInputCorrection(rt.InputCorrection); f != 1 {
		out.InputTokens = int64(math.Ceil(float64(out.InputTokens) * f))
	}
	out.Approximate = out.Approximate || approx || c.fallback

	if req.Format != FormatEmbeddings {
		out.OutputTokens = e.outputTokens(model, req.MaxTokens, routeP95Output)
		if req.N > 1 {
			out.OutputTokens *= req.N
		}
		out.ArrivalOutputTokens = req.MaxTokens * max(1, req.N)
	}
	return out
}

// chatTokens counts a chat-shaped request's input: the system prompt and
// messages with their framing, tool calls, tool definitions and the
// response format. media are the parts (images, …) that the family factor
// does not scale.
func (e *Estimator) chatTokens(c *counter, fam family, model string, req *Request) (text, media int64, approx bool) {
	for _, p := range req.System {
		t, m, a := e.partTokens(c, fam, model, p)
		text, media, approx = text+t, media+m, approx || a
	}
	if len(req.System) > 0 {
		text += tokensPerMessage
	}
	for i := range req.Messages {
		msg := &req.Messages[i]
		text += tokensPerMessage + c.count(msg.Role)
		if msg.Name != "" {
			text += c.count(msg.Name) + tokensPerName
		}
		if msg.ToolCallID != "" {
			text += c.count(msg.ToolCallID)
		}
		for _, p := range msg.Parts {
			t, m, a := e.partTokens(c, fam, model, p)
			text, media, approx = text+t, media+m, approx || a
		}
		for _, tc := range msg.ToolCalls {
			text += tokensPerToolCall + c.count(tc.Name) + c.count(tc.Arguments)
		}
	}
	text += tokensReplyPriming
	if len(req.Tools) > 0 {
		approx = true
		if fam == famClaude {
			text += tokensClaudeToolSys
		} else {
			text += tokensToolsPreamble
		}
		for _, t := range req.Tools {
			text += tokensPerTool + c.count(t.Name) + c.count(t.Description) + c.countJSON(t.Parameters)
		}
	}
	if rf := req.ResponseFormat; rf.Structured() {
		text += tokensResponseFmt + c.count(rf.Name) + c.countJSON(rf.Schema)
	}
	return text, media, approx
}

// ClampInputCorrection returns f within [InputCorrectionMin,
// InputCorrectionMax]; 0, NaN and ±Inf mean no correction (1).
func ClampInputCorrection(f float64) float64 {
	if f == 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 1
	}
	return math.Max(InputCorrectionMin, math.Min(InputCorrectionMax, f))
}

// outputTokens = min(max tokens asked, route p95, default, model cap), each
// term only when known.
func (e *Estimator) outputTokens(model string, asked, p95 int64) int64 {
	o := e.defaultOut
	if asked > 0 && asked < o {
		o = asked
	}
	if p95 > 0 && p95 < o {
		o = p95
	}
	for _, mc := range e.caps {
		if strings.HasPrefix(model, mc.prefix) {
			if mc.cap < o {
				o = mc.cap
			}
			break
		}
	}
	return o
}

// partTokens returns (text tokens, media tokens, approximate).
func (e *Estimator) partTokens(c *counter, fam family, model string, p Part) (int64, int64, bool) {
	switch p.Type {
	case PartText:
		return c.count(p.Text), 0, false
	case PartOther:
		return c.count(p.Text), 0, true
	case PartImage:
		return 0, imageTokens(fam, model, p.Image), true
	case PartDocument:
		return 0, tokensDocument, true
	case PartAudio:
		return 0, tokensAudio, true
	}
	return 0, 0, true
}

// imageTokens approximates an image part per provider:
//   - OpenAI tile models: detail low = 85; else fit in 2048×2048, shortest
//     side to 768, 170 per 512-px tile + 85 (765 when the size is unknown);
//     gpt-4o-mini uses 2833 + 5667 per tile. Patch models (gpt-4.1-mini,
//     gpt-4.1-nano, o4-mini): 32-px patches capped at 1536, times the model's
//     multiplier.
//   - Claude: w×h/750 after fitting the long edge in 1568 px, at most 1600
//     (1600 when unknown).
//   - Gemini: 258 when both sides ≤ 384 px, else 258 per 768-px tile (1032
//     when unknown).
func imageTokens(fam family, model string, img *Image) int64 {
	var detail string
	w, h := 0, 0
	if img != nil {
		detail = strings.ToLower(img.Detail)
		w, h = imageSize(img)
	}
	known := w > 0 && h > 0
	switch fam {
	case famClaude:
		if !known {
			return 1600
		}
		fw, fh := float64(w), float64(h)
		if long := math.Max(fw, fh); long > 1568 {
			fw, fh = fw*1568/long, fh*1568/long
		}
		return int64(math.Min(1600, math.Ceil(fw*fh/750)))
	case famGemini:
		if !known {
			return 4 * 258
		}
		if w <= 384 && h <= 384 {
			return 258
		}
		return int64(ceilDiv(w, 768)*ceilDiv(h, 768)) * 258
	}
	for _, pm := range []struct {
		prefix string
		mult   float64
	}{{"gpt-4.1-mini", 1.62}, {"gpt-4.1-nano", 2.46}, {"o4-mini", 1.72}} {
		if strings.HasPrefix(model, pm.prefix) {
			patches := 1536
			if known {
				patches = min(1536, ceilDiv(w, 32)*ceilDiv(h, 32))
			}
			return int64(math.Ceil(float64(patches) * pm.mult))
		}
	}
	base, perTile := int64(85), int64(170)
	if strings.HasPrefix(model, "gpt-4o-mini") {
		base, perTile = 2833, 5667
	}
	if detail == "low" {
		return base
	}
	if !known {
		return base + 4*perTile
	}
	fw, fh := float64(w), float64(h)
	if long := math.Max(fw, fh); long > 2048 {
		fw, fh = fw*2048/long, fh*2048/long
	}
	if short := math.Min(fw, fh); short > 768 {
		fw, fh = fw*768/short, fh*768/short
	}
	tiles := int64(math.Ceil(fw/512) * math.Ceil(fh/512))
	return base + tiles*perTile
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// imageSize decodes the dimensions of an inline (base64) PNG, JPEG or GIF;
// 0, 0 when unknown (remote URL, other format, bad data).
func imageSize(img *Image) (int, int) {
	data := img.Data
	if data == "" && strings.HasPrefix(img.URL, "data:") {
		i := strings.Index(img.URL, ";base64,")
		if i < 0 {
			return 0, 0
		}
		data = img.URL[i+len(";base64,"):]
	}
	if data == "" {
		return 0, 0
	}
	cfg, _, err := image.DecodeConfig(base64.NewDecoder(base64.StdEncoding, strings.NewReader(data)))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width > 1<<16 || cfg.Height > 1<<16 {
		return 0, 0
	}
	return cfg.Width, cfg.Height
}
