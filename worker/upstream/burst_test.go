package upstream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	mcpgoserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// Every progress notification a fronted server sends before its result
// reaches the client before that result, in order, though the server
// (the Go SDK's) sends them back to back with its result: 20 of them, over
// stdio and HTTP, to a 2025-11-25 session and to a 2026-07-28 request. The
// client reads the call's stream raw: what is checked is the gateway's
// wire.
func TestEveryProgressOfABurstArrives(t *testing.T) {
	const n, rounds = 20, 5
	// mcp-go's Streamable HTTP server itself drops a notification now and
	// then (its raw stream carries 19 of 20): what it sent is read off its
	// wire, and exactly that must arrive.
	mcpgoTap := &sseTap{}
	for _, tr := range []struct {
		name string
		opts func(*testing.T) upstream.Options
		tap  *sseTap // what the server sent, where it may send less than n
	}{
		{"stdio", func(*testing.T) upstream.Options { return fixtureStdio() }, nil},
		{"http", func(t *testing.T) upstream.Options { return fixtureHTTP(t, false) }, nil},
		{"http-2026", func(t *testing.T) upstream.Options { return fixtureHTTP(t, true) }, nil},
		{"mcp-go-stdio", func(*testing.T) upstream.Options { return mcpgoStdio() }, nil},
		{"mcp-go-http", func(t *testing.T) upstream.Options {
			return matrixHTTP(t, mcpgoTap.wrap(mcpgoserver.NewStreamableHTTPServer(mcpgoServer())))
		}, mcpgoTap},
	} {
		t.Run(tr.name, func(t *testing.T) {
			st := startStack(t, tr.opts(t), "burst")
			calls := 0
			for _, era := range []string{"2025-11-25", "2026-07-28"} {
				t.Run(era, func(t *testing.T) {
					for round := range rounds {
						got := burstCall(t, st.url, era, round+1, n)
						calls++
						want := make([]float64, n)
						for i := range want {
							want[i] = float64(i + 1)
						}
						if tr.tap != nil {
							want = tr.tap.burst(t, calls)
						}
						if fmt.Sprint(got) != fmt.Sprint(want) {
							t.Fatalf("round %d: progress %v before the result; the server sent %v", round, got, want)
						}
					}
				})
			}
		})
	}
}

// sseTap records the progress a Streamable HTTP server wrote on the
// response stream of each burst call, in the order of the calls.
type sseTap struct {
	mu     sync.Mutex
	bursts [][]float64
}

func (tp *sseTap) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !bytes.Contains(body, []byte(`"burst"`)) {
			h.ServeHTTP(w, r)
			return
		}
		tee := &teeWriter{ResponseWriter: w}
		h.ServeHTTP(tee, r)
		var sent []float64
		for line := range strings.SplitSeq(tee.written(), "\n") {
			var m struct {
				Method string `json:"method"`
				Params struct {
					Progress float64 `json:"progress"`
				} `json:"params"`
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(data), &m) == nil && m.Method == "notifications/progress" {
				sent = append(sent, m.Params.Progress)
			}
		}
		tp.mu.Lock()
		tp.bursts = append(tp.bursts, sent)
		tp.mu.Unlock()
	})
}

// burst is the progress the server sent in its i'th burst call (from 1),
// once its handler has returned.
func (tp *sseTap) burst(t *testing.T, i int) []float64 {
	t.Helper()
	testcluster.WaitFor(t, "the server's burst stream", func() bool {
		tp.mu.Lock()
		defer tp.mu.Unlock()
		return len(tp.bursts) >= i
	})
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.bursts[i-1]
}

// teeWriter keeps a copy of what a handler writes.
type teeWriter struct {
	http.ResponseWriter
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(b)
	w.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func (w *teeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *teeWriter) written() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// burstCall calls burst {n} in era with a progress token and returns the
// progress the call's stream carried before the result; it fails the test
// on anything after the result, or on no result.
func burstCall(t *testing.T, url, era string, id, n int) []float64 {
	t.Helper()
	h := map[string]string{}
	meta := fmt.Sprintf(`{"progressToken":"tok-%d"}`, id)
	if era == "2026-07-28" {
		h["Mcp-Protocol-Version"], h["Mcp-Method"], h["Mcp-Name"] = era, "tools/call", "burst"
		meta = fmt.Sprintf(`{"progressToken":"tok-%d","io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{}}`, id, era)
	} else {
		h["Mcp-Session-Id"] = initSession(t, url, era)
		h["Mcp-Protocol-Version"] = era
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"burst","arguments":{"n":%d},"_meta":%s}}`, id, n, meta)
	var progress []float64
	answered := false
	for _, data := range sseMessages(t, url, h, body) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Progress float64 `json:"progress"`
			} `json:"params"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("bad event %q", data)
		}
		switch {
		case answered:
			t.Fatalf("%s after the result", data)
		case m.Method == "notifications/progress":
			progress = append(progress, m.Params.Progress)
		case m.Result != nil:
			answered = true
		default:
			t.Fatalf("unexpected %s", data)
		}
	}
	if !answered {
		t.Fatalf("no result; progress %v", progress)
	}
	return progress
}

// initSession opens a 2025-era session with the gateway.
func initSession(t *testing.T, url, era string) string {
	t.Helper()
	resp, b := testcluster.PostMCP(t, url, "", "", fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, era))
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize: %s %s", resp.Status, b)
	}
	resp, b = testcluster.PostMCP(t, url, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %s %s", resp.Status, b)
	}
	return sid
}

// sseMessages POSTs body with headers h and returns the JSON-RPC messages
// of the response: its SSE events' data, or its JSON body.
func sseMessages(t *testing.T, url string, h map[string]string, body string) []json.RawMessage {
	t.Helper()
	msgs, err := postMessages(t.Context(), url, h, body)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// postMessages POSTs body with headers h and returns the JSON-RPC
// messages of the response, read until it ends or ctx closes it: its SSE
// events' data, or its JSON body.
func postMessages(ctx context.Context, url string, h map[string]string, body string) ([]json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("HTTP %s %s: %s", resp.Status, ct, b)
	}
	if !strings.HasPrefix(ct, "text/event-stream") {
		b, err := io.ReadAll(resp.Body)
		return []json.RawMessage{b}, err
	}
	var out []json.RawMessage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
			out = append(out, bytes.Clone(data))
		}
	}
	return out, nil // a stream closed by ctx ends here too
}
