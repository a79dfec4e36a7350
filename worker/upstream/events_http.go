package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// The events extension over Streamable HTTP. The SDK's connection cannot
// be wrapped there (it starts its standalone stream through a method of
// its own type), so each request of ours is a POST of its own to the
// server's endpoint, made with the HTTP client (and so the credentials)
// of the SDK's transport, with the headers and _meta of the revision the
// session negotiated. Its response, JSON or a stream of Server-Sent
// Events, is read by a goroutine of its own: the stream's
// notifications/events/* messages are queued for the call in order, and
// the response with our id ends the request.
//
// A cancel closes the request's stream, which is the cancel of a
// 2026-07-28 server; a 2025 session is also sent notifications/cancelled,
// as closing a stream cancels nothing there.

// maxEventsMessage bounds one message of a response the adapter reads.
const maxEventsMessage = 16 << 20

// eventsHTTP sends the extension's requests to one upstream session over
// Streamable HTTP.
type eventsHTTP struct {
	client  *http.Client
	url     string
	version string         // the session's protocol revision
	session string         // its Mcp-Session-Id (2025 era), or ""
	meta    map[string]any // the _meta of a 2026-07-28 request
	next    atomic.Int64

	ctx  context.Context // ends every request in flight on close
	stop context.CancelFunc
	wg   sync.WaitGroup // the requests' readers

	mu     sync.Mutex
	closed bool // guarded by mu
}

var _ eventsLink = (*eventsHTTP)(nil)

// newEventsHTTP is the link beside session s of the server at a's URL.
func (a *Adapter) newEventsHTTP(s *mcp.ClientSession) *eventsHTTP {
	h := &eventsHTTP{client: a.opts.HTTPClient, url: a.opts.URL, version: s.InitializeResult().ProtocolVersion, session: s.ID()}
	if h.client == nil {
		h.client = http.DefaultClient
	}
	if mcpspec.Stateless(h.version) {
		// What the SDK puts in the _meta of the session's other requests.
		h.meta = map[string]any{
			mcp.MetaKeyProtocolVersion:    h.version,
			mcp.MetaKeyClientInfo:         clientInfo,
			mcp.MetaKeyClientCapabilities: clientCapabilities(),
		}
	}
	h.ctx, h.stop = context.WithCancel(context.Background())
	return h
}

// clientCapabilities are the capabilities the adapter's client declares,
// as the SDK sends them (its Roots follows RootsV2).
func clientCapabilities() *mcp.ClientCapabilities {
	caps := adapterCapabilities()
	caps.Roots.ListChanged = caps.RootsV2.ListChanged
	return caps
}

// send POSTs a request of ours; a goroutine reads its response.
func (h *eventsHTTP) send(_ context.Context, method string, params json.RawMessage, stream bool) (*eventsRequest, error) {
	id := fmt.Sprintf("%s%d", eventsIDPrefix, h.next.Add(1))
	req, stop, err := h.request(id, method, params)
	if err != nil {
		return nil, err
	}
	r := newEventsRequest(stream)
	r.cancel = func(ctx context.Context, reason string) {
		stop() // closes the request's stream
		h.cancel(ctx, r, id, reason)
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		stop()
		return nil, errEventsGone
	}
	h.wg.Add(1)
	h.mu.Unlock()
	go func() { // owned by h.wg, waited in close; ends with the response or stop
		defer h.wg.Done()
		defer stop()
		resp, err := h.read(req, r, id)
		r.end(resp, err, false)
	}()
	return r, nil
}

// request is the POST of a request with our id, on a context of its own
// whose stop closes its stream.
func (h *eventsHTTP) request(id, method string, params json.RawMessage) (*http.Request, context.CancelFunc, error) {
	if h.meta != nil {
		var err error
		if params, err = withMeta(params, h.meta); err != nil {
			return nil, nil, err
		}
	}
	jid, _ := jsonrpc.MakeID(id)
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: jid, Method: method, Params: params})
	if err != nil {
		return nil, nil, err
	}
	ctx, stop := context.WithCancel(h.ctx)
	req, err := h.post(ctx, body)
	if err != nil {
		stop()
		return nil, nil, err
	}
	if mcpspec.Stateless(h.version) {
		req.Header.Set(mcpspec.HeaderMethod, method)
		if name := nameOf(params, mcpspec.NameParam(method)); name != "" {
			req.Header.Set(mcpspec.HeaderName, headerValue(name))
		}
	}
	return req, stop, nil
}

// post is a POST of body to the server, with the session's headers.
func (h *eventsHTTP) post(ctx context.Context, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcpspec.HeaderProtocolVersion, h.version)
	if h.session != "" {
		req.Header.Set(mcpspec.HeaderSessionID, h.session)
	}
	return req, nil
}

// withMeta adds meta's keys to the _meta of params, a JSON object.
func withMeta(params json.RawMessage, meta map[string]any) (json.RawMessage, error) {
	p := map[string]json.RawMessage{}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, fmt.Errorf("params: %w", err)
		}
	}
	m := map[string]any{}
	if raw := p["_meta"]; raw != nil {
		json.Unmarshal(raw, &m)
	}
	for k, v := range meta {
		if _, ok := m[k]; !ok {
			m[k] = v
		}
	}
	p["_meta"], _ = json.Marshal(m)
	return json.Marshal(p)
}

// nameOf is the string value of params' member key, "" if none.
func nameOf(params json.RawMessage, key string) string {
	if key == "" {
		return ""
	}
	var p map[string]any
	json.Unmarshal(params, &p)
	s, _ := p[key].(string)
	return s
}

// headerValue is v as an Mcp-Name value: as it is if a header may carry
// it, else in the =?base64?...?= sentinel.
func headerValue(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(v)) + "?="
		}
	}
	return v
}

// read sends req and reads its response until the message with our id,
// queueing a stream's notifications for r on the way.
func (h *eventsHTTP) read(req *http.Request, r *eventsRequest, id string) (*jsonrpc.Response, error) {
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errEventsGone, err)
	}
	defer resp.Body.Close()
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case ct == "text/event-stream" && resp.StatusCode == http.StatusOK:
		return readEvents(resp.Body, r, id)
	case ct == "application/json":
		// The answer, or (with an HTTP error status) the server's
		// JSON-RPC error for the request.
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxEventsMessage))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errEventsGone, err)
		}
		if m, err := jsonrpc.DecodeMessage(b); err == nil {
			if res, ok := m.(*jsonrpc.Response); ok && res.ID.Raw() == id {
				return res, nil
			}
		}
	}
	if resp.StatusCode == http.StatusNotFound && h.session != "" {
		return nil, fmt.Errorf("%w: the server ended the session (HTTP %s)", errEventsGone, resp.Status)
	}
	return nil, fmt.Errorf("the server answered HTTP %s, with no JSON-RPC response", resp.Status)
}

// errNoAnswer is a response stream that ended without the response.
var errNoAnswer = fmt.Errorf("%w: the server closed the request's stream without answering it", errEventsGone)

// readEvents reads a response's Server-Sent Events until the message
// with our id. Every line of an event is bounded by maxEventsMessage.
func readEvents(body io.Reader, r *eventsRequest, id string) (*jsonrpc.Response, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventsMessage)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(v, []byte(" "))...)
			continue
		}
		if len(line) > 0 || len(data) == 0 {
			continue // another field (event, id, retry), or a comment
		}
		m, err := jsonrpc.DecodeMessage(data)
		data = data[:0]
		switch m := m.(type) {
		case *jsonrpc.Response:
			if err == nil && m.ID.Raw() == id {
				return m, nil
			}
		case *jsonrpc.Request:
			if err == nil && isEventsNote(m) {
				r.note(m)
				select {
				case <-r.done:
					return nil, nil // the client fell behind: the stream is cancelled
				default:
				}
			}
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %v", errEventsGone, err)
	}
	return nil, errNoAnswer
}

// cancel tells a 2025 session's server that we gave up our request id;
// its stream was closed already.
func (h *eventsHTTP) cancel(ctx context.Context, r *eventsRequest, id, reason string) {
	if mcpspec.Stateless(h.version) || r.answered() {
		return
	}
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), cancelWait)
	defer stop()
	body, _ := jsonrpc.EncodeMessage(cancelledNote(id, reason))
	req, err := h.post(ctx, body)
	if err != nil {
		return
	}
	if resp, err := h.client.Do(req); err == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
	}
}

// close ends every request in flight and waits for their readers.
// Idempotent.
func (h *eventsHTTP) close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.stop()
	h.wg.Wait()
}
