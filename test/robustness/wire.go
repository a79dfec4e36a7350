package robustness

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// wire turns the JSON-RPC messages one client session sends and receives
// into ClientCall observations. Every ClientCall field written after the
// call is recorded is written under mu.
type wire struct {
	mu      sync.Mutex
	byToken map[string]*ClientCall // progress token, compact JSON
	byID    map[string]*ClientCall // request id, compact JSON
	// fresh makes the record of a tools/call nobody announced (the
	// TypeScript clients); nil ignores such calls.
	fresh func(tool string) *ClientCall
	// sent, if set, is told of each tools/call as it goes out (window.go).
	sent func(c *ClientCall, at time.Time)
}

func newWire(fresh func(tool string) *ClientCall) *wire {
	return &wire{byToken: map[string]*ClientCall{}, byID: map[string]*ClientCall{}, fresh: fresh}
}

// expect announces a call that will go out with progress token token.
func (w *wire) expect(token string, c *ClientCall) {
	b, _ := json.Marshal(token)
	w.mu.Lock()
	w.byToken[string(b)] = c
	w.mu.Unlock()
}

// mark runs f under the lock that guards the recorded calls.
func (w *wire) mark(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f()
}

type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		Name          string          `json:"name"`
		ProgressToken json.RawMessage `json:"progressToken"`
		Meta          struct {
			ProgressToken json.RawMessage `json:"progressToken"`
		} `json:"_meta"`
	} `json:"params"`
	Result *struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// messages splits a body that is one message or a batch.
func messages(b []byte) []rpcMessage {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	if b[0] == '[' {
		var ms []rpcMessage
		json.Unmarshal(b, &ms)
		return ms
	}
	var m rpcMessage
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return []rpcMessage{m}
}

// out records messages the client sent.
func (w *wire) out(b []byte, at time.Time) {
	for _, m := range messages(b) {
		if m.Method != "tools/call" || len(m.ID) == 0 {
			continue
		}
		token := compactID(m.Params.Meta.ProgressToken)
		w.mu.Lock()
		c := w.byToken[token]
		if c == nil && w.fresh != nil {
			c = w.fresh(m.Params.Name)
			if token != "" {
				w.byToken[token] = c
			}
		}
		first := c != nil && c.Sent.IsZero()
		if first {
			c.RequestID = json.RawMessage(compactID(m.ID))
			c.Sent = at
			w.byID[compactID(m.ID)] = c
		}
		w.mu.Unlock()
		if first && w.sent != nil {
			w.sent(c, at)
		}
	}
}

// in records messages the client received.
func (w *wire) in(b []byte, at time.Time) {
	for _, m := range messages(b) {
		w.mu.Lock()
		switch {
		case m.Method == "notifications/progress":
			if c := w.byToken[compactID(m.Params.ProgressToken)]; c != nil {
				c.Progress = append(c.Progress, at)
			}
		case m.Method == "" && len(m.ID) > 0:
			if c := w.byID[compactID(m.ID)]; c != nil {
				c.Responses = append(c.Responses, response(m, at))
			}
		}
		w.mu.Unlock()
	}
}

func response(m rpcMessage, at time.Time) Response {
	switch {
	case m.Error != nil:
		return Response{At: at, Kind: "rpc_error", Text: m.Error.Message}
	case m.Result == nil:
		return Response{At: at, Kind: "rpc_error", Text: "neither result nor error"}
	}
	var text []string
	for _, c := range m.Result.Content {
		text = append(text, c.Text)
	}
	kind := "result"
	if m.Result.IsError {
		kind = "error_result"
	}
	return Response{At: at, Kind: kind, Text: strings.Join(text, " ")}
}

// lines calls f with every complete line written to it.
type lines struct {
	buf []byte
	f   func([]byte)
}

func (l *lines) feed(p []byte) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return
		}
		l.f(bytes.TrimRight(l.buf[:i], "\r"))
		l.buf = l.buf[i+1:]
	}
}

func (l *lines) flush() {
	if len(l.buf) > 0 {
		l.f(l.buf)
		l.buf = nil
	}
}

// tapReader feeds everything read through it to lines.
type tapReader struct {
	io.ReadCloser
	l    *lines
	once sync.Once
}

func (t *tapReader) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.l.feed(p[:n])
	if err != nil {
		t.once.Do(t.l.flush)
	}
	return n, err
}

// tapWriter feeds everything written through it to lines.
type tapWriter struct {
	io.WriteCloser
	mu sync.Mutex
	l  *lines
}

func (t *tapWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.l.feed(p)
	t.mu.Unlock()
	return t.WriteCloser.Write(p)
}

// tapTransport is the HTTP client side of a wire: it adds the bearer
// token and records every message in both directions.
type tapTransport struct {
	base  http.RoundTripper
	token string
	w     *wire
}

func (t *tapTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t.token)
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		t.w.out(b, time.Now())
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &tapReader{ReadCloser: resp.Body, l: &lines{f: func(line []byte) {
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				t.w.in(d, time.Now())
			}
		}}}
	} else if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var body []byte
		resp.Body = &tapReader{ReadCloser: resp.Body, l: &lines{f: func(line []byte) {
			body = append(body, line...)
			t.w.in(body, time.Now())
			body = body[:0]
		}}}
	}
	return resp, nil
}
