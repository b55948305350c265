package gateway

import (
	"bufio"
	"bytes"
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
// by event, flushing each, while the adapter (provider.Stream) counts usage
// and says what the client gets of each event, and returns its end for
// the lifecycle (which never retries a stream: once the first byte reached
// the client the attempt is final). A client that goes away cancels the
// upstream call (the request context is the upstream's parent) and the
// attempt is settled with the usage streamed so far (Partial).
//
// When the adapter forced stream_options.include_usage for an OpenAI-style
// stream, the extra usage-only chunk ("choices": []) is counted and then
// withheld, so the client sees exactly the stream it asked for; a Gemini
// stream is translated to chat.completion.chunk events.
func (c *call) relay(attempt int32) lifecycle.Input {
	resp, sent := c.upResp, c.upSent
	defer resp.Body.Close()
	st := c.upEx.NewStream(c.req.Model, c.reqID, c.req.IncludeUsage)
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

	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var (
		event, data bytes.Buffer
		raw         bytes.Buffer // the event's bytes as received
		firstByteMs int64
		writeErr    error
		readErr     error
	)
	sec := provider.SecretsOf(c.cfg, clientKey(c.r))
	emit := func() {
		defer func() { event.Reset(); data.Reset(); raw.Reset() }()
		if raw.Len() == 0 {
			return
		}
		out := st.Event(event.Bytes(), data.Bytes(), raw.Bytes())
		if writeErr != nil || len(out) == 0 {
			return
		}
		if isErrorEvent(event.Bytes(), data.Bytes()) {
			// A provider's error inside a 200 stream is a provider
			// message like a refusal's: cut of the credentials the
			// gateway holds. Content events pass untouched (and free).
			out = []byte(sec.Redact(string(out)))
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
	if writeErr == nil && readErr == nil {
		if tail := st.Tail(); len(tail) > 0 {
			_, writeErr = c.w.Write(tail)
			c.w.Flush()
		}
	}
	usage, partial := st.Usage()
	u := lifecycle.Upstream{Status: resp.StatusCode, Partial: partial, FirstByteMs: firstByteMs, TotalMs: time.Since(sent).Milliseconds(),
		Usage: lifecycle.Usage{InputTokens: usage.InputTokens, CachedInputTokens: usage.CachedInputTokens, OutputTokens: usage.OutputTokens}}
	if writeErr != nil || readErr != nil || !st.Finished() {
		u.Failure = c.cancelReason()
		if writeErr != nil {
			u.Failure = schemas.ReasonClientDisconnect
		}
	}
	return lifecycle.Input{Kind: lifecycle.StreamEnded, Attempt: attempt, Upstream: u}
}

// isErrorEvent reports an error event inside a stream: Anthropic's
// `event: error`, or an OpenAI-style (and Gemini) `data: {"error": …}`.
func isErrorEvent(event, data []byte) bool {
	if bytes.Equal(event, []byte("error")) {
		return true
	}
	d := bytes.TrimLeft(data, " \t\r\n")
	if len(d) == 0 || d[0] != '{' {
		return false
	}
	d = bytes.TrimLeft(d[1:], " \t\r\n")
	return bytes.HasPrefix(d, []byte(`"error"`))
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
