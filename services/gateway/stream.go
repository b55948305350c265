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
	resp := c.upResp
	defer resp.Body.Close()
	rl := relayer{c: c, st: c.upEx.NewStream(c.parsed.Request.Model, c.reqID, c.parsed.Request.IncludeUsage),
		sec: provider.SecretsOf(c.cfg, clientKey(c.r)), sent: c.upSent}
	c.startStream(resp.Header)
	rl.pump(bufio.NewReaderSize(resp.Body, 64<<10))
	return lifecycle.Input{Kind: lifecycle.StreamEnded, Attempt: attempt, Upstream: rl.upstream(resp.StatusCode)}
}

// startStream commits the client's response to a 200 event stream, with
// the provider's request id and Sluice's headers, and flushes it so that
// the client sees the answer begin before the first event. Buffering by
// proxies is turned off (X-Accel-Buffering), as it would hold every event.
func (c *call) startStream(up http.Header) {
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	for _, k := range []string{"x-request-id", "request-id"} {
		if v := up.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	c.setSluiceHeaders(h)
	c.w.WriteHeader(http.StatusOK)
	c.w.Flush()
}

// relayer is one stream relay's state: the event being read (its name,
// its data and its bytes as received), when the client got its first byte,
// and the first write and read errors, which end the relay.
type relayer struct {
	c    *call
	st   *provider.Stream
	sec  provider.Secrets
	sent time.Time // when the upstream request was sent

	event, data bytes.Buffer
	raw         bytes.Buffer // the event's bytes as received
	firstByteMs int64
	writeErr    error
	readErr     error
}

// pump reads the provider's lines and relays each event as it completes.
// It stops at the end of the stream, at a read error, or when a write to
// the client fails: the client is gone, and cancelling the request context
// (net/http does when the connection closes) aborts the upstream call.
func (rl *relayer) pump(br *bufio.Reader) {
	for {
		line, err := readLine(br)
		if len(line) > 0 {
			rl.line(line)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				rl.emit() // an event not followed by a blank line
			} else {
				rl.readErr = err
			}
			return
		}
		if rl.writeErr != nil {
			return
		}
	}
}

// line adds one SSE line to the event being read; a blank line ends it.
// Several data lines join with newlines, as the SSE format says; other
// fields (id, retry, comments) are kept only in the raw bytes.
func (rl *relayer) line(line []byte) {
	rl.raw.Write(line)
	t := bytes.TrimRight(line, "\r\n")
	switch {
	case len(t) == 0:
		rl.emit()
	case bytes.HasPrefix(t, []byte("data:")):
		if rl.data.Len() > 0 {
			rl.data.WriteByte('\n')
		}
		rl.data.Write(bytes.TrimPrefix(bytes.TrimPrefix(t, []byte("data:")), []byte(" ")))
	case bytes.HasPrefix(t, []byte("event:")):
		rl.event.Reset()
		rl.event.Write(bytes.TrimSpace(bytes.TrimPrefix(t, []byte("event:"))))
	}
}

// emit hands the event read to the adapter, which counts its usage and says
// what the client gets of it, and writes and flushes that. Once a write
// has failed nothing more is written.
func (rl *relayer) emit() {
	defer func() { rl.event.Reset(); rl.data.Reset(); rl.raw.Reset() }()
	if rl.raw.Len() == 0 {
		return
	}
	out := rl.st.Event(rl.event.Bytes(), rl.data.Bytes(), rl.raw.Bytes())
	if rl.writeErr != nil || len(out) == 0 {
		return
	}
	if isErrorEvent(rl.event.Bytes(), rl.data.Bytes()) {
		// A provider's error inside a 200 stream is a provider
		// message like a refusal's: cut of the credentials the
		// gateway holds. Content events pass untouched (and free).
		out = []byte(rl.sec.Redact(string(out)))
	}
	if rl.firstByteMs == 0 {
		rl.firstByteMs = max(1, time.Since(rl.sent).Milliseconds())
	}
	if _, rl.writeErr = rl.c.w.Write(out); rl.writeErr == nil {
		rl.c.w.Flush()
	}
}

// upstream writes what the adapter holds back to the end of a stream that
// ended well, and reports the attempt's end: the usage streamed, and a
// failure when the stream did not finish (a client that went away is
// client_disconnect, anything else the call's cancel reason).
func (rl *relayer) upstream(status int) lifecycle.Upstream {
	if rl.writeErr == nil && rl.readErr == nil {
		if tail := rl.st.Tail(); len(tail) > 0 {
			_, rl.writeErr = rl.c.w.Write(tail)
			rl.c.w.Flush()
		}
	}
	usage, partial := rl.st.Usage()
	u := lifecycle.Upstream{Status: status, Partial: partial, FirstByteMs: rl.firstByteMs, TotalMs: time.Since(rl.sent).Milliseconds(),
		Usage: lifecycle.Usage{InputTokens: usage.InputTokens, CachedInputTokens: usage.CachedInputTokens, OutputTokens: usage.OutputTokens}}
	if rl.writeErr != nil || rl.readErr != nil || !rl.st.Finished() {
		u.Failure = rl.c.cancelReason()
		if rl.writeErr != nil {
			u.Failure = schemas.ReasonClientDisconnect
		}
	}
	return u
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
