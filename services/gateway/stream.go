package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/admission/lifecycle"
	"github.com/sluice-dev/sluice/admission/provider"
	"github.com/sluice-dev/sluice/schemas"
)

// sseLineMax bounds one SSE line from a provider; a longer line ends the
// stream as an upstream error rather than growing memory without limit.
const sseLineMax = 8 << 20

// relay relays the provider's SSE response held since the dispatch event
// by event, flushing each, while counting usage, and returns its end for
// the lifecycle (which never retries a stream: once the first byte reached
// the client the attempt is final). A client that goes away cancels the
// upstream call (the request context is the upstream's parent) and the
// attempt is settled with the usage streamed so far (Partial).
//
// When the gateway forced stream_options.include_usage for an OpenAI-style
// stream, the extra usage-only chunk ("choices": []) is counted and then
// withheld, so the client sees exactly the stream it asked for.
func (c *call) relay(attempt int32) lifecycle.Input {
	resp, p, sent, forcedUsage := c.upResp, c.upCand.prov, c.upSent, c.upForced
	defer resp.Body.Close()
	su := provider.NewStreamUsage(p.Kind)
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	for _, k := range []string{"x-request-id", "request-id"} {
		if v := resp.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	c.setSluiceHeaders(h)
	c.w.WriteHeader(http.StatusOK)
	c.w.Flush()

	var tr *provider.GeminiStream
	if p.Kind == schemas.ProviderGemini {
		tr = provider.NewGeminiStream(c.req.Model, "chatcmpl-"+c.reqID, c.req.IncludeUsage)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var (
		event, data bytes.Buffer
		raw         bytes.Buffer // the event's bytes as received
		firstByteMs int64
		writeErr    error
		readErr     error
	)
	emit := func() {
		defer func() { event.Reset(); data.Reset(); raw.Reset() }()
		if raw.Len() == 0 {
			return
		}
		if data.Len() > 0 || event.Len() > 0 {
			su.Feed(event.Bytes(), data.Bytes())
		}
		if writeErr != nil {
			return
		}
		out := raw.Bytes()
		switch {
		case tr != nil:
			out = tr.Translate(data.Bytes())
		case forcedUsage && isUsageOnlyChunk(data.Bytes()):
			out = nil
		}
		if len(out) == 0 {
			return
		}
		if firstByteMs == 0 {
			firstByteMs = max(1, time.Since(sent).Milliseconds())
		}
		if _, writeErr = c.w.Write(out); writeErr == nil {
			c.w.Flush()
		}
	}
	for {
		line, err := readLine(br)
		if len(line) > 0 {
			raw.Write(line)
			t := bytes.TrimRight(line, "\r\n")
			switch {
			case len(t) == 0:
				emit()
			case bytes.HasPrefix(t, []byte("data:")):
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.Write(bytes.TrimPrefix(bytes.TrimPrefix(t, []byte("data:")), []byte(" ")))
			case bytes.HasPrefix(t, []byte("event:")):
				event.Reset()
				event.Write(bytes.TrimSpace(bytes.TrimPrefix(t, []byte("event:"))))
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				emit() // an event not followed by a blank line
			} else {
				readErr = err
			}
			break
		}
		if writeErr != nil {
			// The client is gone: stop reading; cancelling the
			// request context (net/http does when the connection
			// closes) aborts the upstream call.
			break
		}
	}
	if tr != nil && writeErr == nil && readErr == nil {
		if tail := tr.Finish(); len(tail) > 0 {
			_, writeErr = c.w.Write(tail)
			c.w.Flush()
		}
	}
	usage, partial := su.Usage()
	u := lifecycle.Upstream{Status: resp.StatusCode, Partial: partial, FirstByteMs: firstByteMs, TotalMs: time.Since(sent).Milliseconds(),
		Usage: lifecycle.Usage{InputTokens: usage.InputTokens, CachedInputTokens: usage.CachedInputTokens, OutputTokens: usage.OutputTokens}}
	if writeErr != nil || readErr != nil || !su.Finished() {
		u.Failure = c.cancelReason()
		if writeErr != nil {
			u.Failure = schemas.ReasonClientDisconnect
		}
	}
	return lifecycle.Input{Kind: lifecycle.StreamEnded, Attempt: attempt, Upstream: u}
}

// readLine reads one line, bounded by sseLineMax.
func readLine(br *bufio.Reader) ([]byte, error) {
	var out []byte
	for {
		frag, err := br.ReadSlice('\n')
		if out == nil && err == nil {
			return frag, nil // the common case: the line fits the buffer
		}
		out = append(out, frag...)
		if len(out) > sseLineMax {
			return out, errors.New("provider sent an SSE line over 8 MiB")
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return out, err
		}
	}
}

// isUsageOnlyChunk recognises OpenAI's final usage chunk: "choices": []
// and a non-null usage.
func isUsageOnlyChunk(data []byte) bool {
	if !bytes.Contains(data, []byte(`"usage"`)) {
		return false
	}
	var ch struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	if json.Unmarshal(data, &ch) != nil {
		return false
	}
	return ch.Choices != nil && len(ch.Choices) == 0 && len(ch.Usage) > 0 && string(ch.Usage) != "null"
}
