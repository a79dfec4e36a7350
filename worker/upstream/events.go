package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
	"github.com/mcpcancel/mcpcancel/worker"
)

// The events extension (SEP-3415, io.modelcontextprotocol/events) of a
// server fronted over stdio. When the server's capabilities declare it,
// the adapter lists its event types (events/list, every page) and offers
// them with its prompts and resources; events/poll and events/stream are
// then forwarded like any request: with the adapter's own request id,
// cancelled with notifications/cancelled when the call is.
//
// The SDK the adapter speaks MCP with knows nothing of the extension, so
// its requests go on the connection under the SDK (eventsConn), with ids
// of the adapter's own that the SDK never sees, and their responses and
// the stream's notifications/events/* messages are taken off the wire
// before the SDK reads it. Over Streamable HTTP the SDK's connection
// cannot be wrapped (see inWireOrder), so a server fronted over HTTP
// offers no event types.
//
// A stream's notifications are queued for its call, whose handler relays
// them in order: the connection's read loop never waits on a client. A
// client that falls more than maxQueuedEvents behind has its stream
// ended (the server is told it is cancelled), not the connection stalled.

const (
	eventsIDPrefix  = "mcpcancel-events-"
	maxQueuedEvents = 1024
	// cancelWait bounds the write of notifications/cancelled to the server.
	cancelWait = 5 * time.Second
)

// errEventsGone means the connection closed under a request.
var errEventsGone = errors.New("the connection to the server closed")

// eventsTransport wraps a stdio transport with eventsConn; made receives
// the connection once Connect made it.
type eventsTransport struct {
	mcp.Transport
	made **eventsConn
}

func (t eventsTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ec := &eventsConn{Connection: c, open: map[string]*eventsRequest{}}
	*t.made = ec
	return ec, nil
}

// eventsConn is a connection the adapter sends requests of the extension
// on, beside the SDK's.
type eventsConn struct {
	mcp.Connection
	next atomic.Int64

	mu     sync.Mutex
	open   map[string]*eventsRequest // guarded by mu; by our id
	closed bool                      // guarded by mu
}

// eventsRequest is one request of ours in flight.
type eventsRequest struct {
	notes chan json.RawMessage // a stream's notifications, as JSON-RPC messages
	done  chan struct{}        // closed once resp, err or overflow is set
	once  sync.Once

	resp     *jsonrpc.Response
	err      error
	overflow bool
}

func (r *eventsRequest) end(resp *jsonrpc.Response, err error, overflow bool) {
	r.once.Do(func() {
		r.resp, r.err, r.overflow = resp, err, overflow
		close(r.done)
	})
}

// Read takes our requests' responses and the streams' notifications off
// the wire; the SDK reads everything else.
func (c *eventsConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		m, err := c.Connection.Read(ctx)
		if err != nil {
			return m, err
		}
		if !c.take(m) {
			return m, nil
		}
	}
}

// take routes m if it is ours, and reports whether it was.
func (c *eventsConn) take(m jsonrpc.Message) bool {
	switch m := m.(type) {
	case *jsonrpc.Response:
		id, ok := m.ID.Raw().(string)
		if !ok || !strings.HasPrefix(id, eventsIDPrefix) {
			return false
		}
		if r := c.remove(id); r != nil {
			r.end(m, nil, false)
		}
		return true // a late answer to a request we gave up is ours too
	case *jsonrpc.Request:
		if m.IsCall() || !strings.HasPrefix(m.Method, "notifications/events/") {
			return false
		}
		c.note(m)
		return true
	}
	return false
}

// note queues a stream's notification for its call, never waiting.
func (c *eventsConn) note(m *jsonrpc.Request) {
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	json.Unmarshal(m.Params, &p)
	id, _ := p.Meta[mcpspec.MetaSubscriptionID].(string)
	c.mu.Lock()
	r := c.open[id]
	c.mu.Unlock()
	if r == nil || r.notes == nil {
		return // a stream that ended, or not ours
	}
	note, _ := json.Marshal(struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}{m.Method, m.Params})
	select {
	case r.notes <- note:
	default:
		r.end(nil, nil, true)
	}
}

func (c *eventsConn) remove(id string) *eventsRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.open[id]
	delete(c.open, id)
	return r
}

// send writes a request of ours; stream says whether it opens a stream.
func (c *eventsConn) send(ctx context.Context, method string, params json.RawMessage, stream bool) (string, *eventsRequest, error) {
	id := fmt.Sprintf("%s%d", eventsIDPrefix, c.next.Add(1))
	r := &eventsRequest{done: make(chan struct{})}
	if stream {
		r.notes = make(chan json.RawMessage, maxQueuedEvents)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return "", nil, errEventsGone
	}
	c.open[id] = r
	c.mu.Unlock()
	jid, _ := jsonrpc.MakeID(id)
	if err := c.Connection.Write(ctx, &jsonrpc.Request{ID: jid, Method: method, Params: params}); err != nil {
		c.remove(id)
		return "", nil, err
	}
	return id, r, nil
}

// cancel tells the server that we gave up our request id.
func (c *eventsConn) cancel(ctx context.Context, id, reason string) {
	if c.remove(id) == nil {
		return // answered meanwhile
	}
	params, _ := json.Marshal(map[string]string{"requestId": id, "reason": reason})
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), cancelWait)
	defer stop()
	c.Connection.Write(ctx, &jsonrpc.Request{Method: "notifications/cancelled", Params: params})
}

// Close closes the connection and ends every request of ours in flight.
func (c *eventsConn) Close() error {
	err := c.Connection.Close()
	c.mu.Lock()
	c.closed = true
	open := c.open
	c.open = map[string]*eventsRequest{}
	c.mu.Unlock()
	for _, r := range open {
		r.end(nil, errEventsGone, false)
	}
	return err
}

// call sends a request and waits for its result; the server's JSON-RPC
// error is returned as it is.
func (c *eventsConn) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	id, r, err := c.send(ctx, method, params, false)
	if err != nil {
		return nil, err
	}
	select {
	case <-r.done:
		return r.result()
	case <-ctx.Done():
		c.cancel(ctx, id, "the call was cancelled")
		return nil, ctx.Err()
	}
}

func (r *eventsRequest) result() (json.RawMessage, error) {
	switch {
	case r.err != nil:
		return nil, r.err
	case r.overflow:
		return nil, fmt.Errorf("the client fell more than %d events behind the stream", maxQueuedEvents)
	case r.resp.Error != nil:
		return nil, r.resp.Error
	}
	return r.resp.Result, nil
}

// eventsConns finds the eventsConn under a session.
type eventsConns struct {
	mu sync.Mutex
	m  map[*mcp.ClientSession]*eventsConn // guarded by mu
}

func (e *eventsConns) add(s *mcp.ClientSession, c *eventsConn) {
	if c == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[*mcp.ClientSession]*eventsConn{}
	}
	e.m[s] = c
}

func (e *eventsConns) of(s *mcp.ClientSession) *eventsConn {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m[s]
}

func (e *eventsConns) remove(s *mcp.ClientSession) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, s)
}

// offersEvents says whether the server's capabilities declare the
// extension.
func offersEvents(caps *mcp.ServerCapabilities) bool {
	_, ok := caps.Extensions[mcpspec.ExtensionEvents]
	return ok
}

// listEvents lists the server's event types, every page, if it declares
// the extension.
func (a *Adapter) listEvents(ctx context.Context, s *mcp.ClientSession, caps *mcp.ServerCapabilities) ([]*worker.EventType, error) {
	if !offersEvents(caps) {
		return nil, nil
	}
	ec := a.events.of(s)
	if ec == nil {
		a.log.Warn("the server offers events, which the adapter passes through over stdio only")
		return nil, nil
	}
	var out []*worker.EventType
	var cursor *string
	for page := 0; ; page++ {
		if page == MaxListPages {
			return nil, fmt.Errorf("listing event types: more than %d pages", MaxListPages)
		}
		params, _ := json.Marshal(map[string]any{"cursor": cursor})
		if cursor == nil {
			params = json.RawMessage(`{}`)
		}
		raw, err := ec.call(ctx, "events/list", params)
		if err != nil {
			return nil, fmt.Errorf("listing event types: %w", err)
		}
		var r struct {
			Events     []json.RawMessage `json:"events"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("listing event types: %w", err)
		}
		for _, e := range r.Events {
			var d struct {
				Name string `json:"name"`
			}
			if json.Unmarshal(e, &d) == nil && d.Name != "" {
				out = append(out, &worker.EventType{Name: d.Name, JSON: e})
			}
		}
		if r.NextCursor == "" {
			return out, nil
		}
		cursor = &r.NextCursor
	}
}

// MaxListPages bounds the pages of one listing of the server's.
const MaxListPages = 100

// isEvents says whether c is a request of the extension.
func isEvents(c *worker.Call) bool {
	return c.Method == worker.MethodEventsPoll || c.Method == worker.MethodEventsStream
}

// eventsRequest forwards events/poll or events/stream. A stream holds no
// slot of MaxConcurrency: it lasts until it is ended, as the extension
// asks of servers' caps.
func (a *Adapter) forwardEvents(ctx context.Context, c *worker.Call) (any, error) {
	if c.Method == worker.MethodEventsPoll {
		release, err := a.acquire(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	s, done, err := a.sessionFor(ctx, c)
	if err != nil {
		if errors.Is(err, ErrSessionsFull) {
			return nil, err
		}
		return nil, worker.Unavailable(err)
	}
	var upErr error
	defer func() { done(upErr) }()
	ec := a.events.of(s)
	if ec == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + c.Method}
	}
	var res json.RawMessage
	if c.Method == worker.MethodEventsPoll {
		res, err = ec.call(ctx, c.Method, c.Params)
	} else {
		res, err = a.stream(ctx, ec, c)
	}
	var rpcErr *jsonrpc.Error
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &rpcErr):
		return nil, rpcErr // the server's own answer, for the client
	case errors.Is(err, errEventsGone):
		upErr = fmt.Errorf("%w (%v); the adapter is reconnecting to it", ErrServerGone, err)
		return nil, worker.Unavailable(upErr)
	}
	return nil, err
}

// stream runs an events/stream: it relays the server's notifications to
// the call's client in order until the server ends the stream (its
// result or error) or the call is cancelled (the server is then told).
func (a *Adapter) stream(ctx context.Context, ec *eventsConn, c *worker.Call) (json.RawMessage, error) {
	id, r, err := ec.send(ctx, c.Method, c.Params, true)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case n := <-r.notes:
			relayNote(c, n)
		case <-r.done:
			for len(r.notes) > 0 { // what the server sent before it ended
				relayNote(c, <-r.notes)
			}
			if r.overflow {
				ec.cancel(ctx, id, "the client fell behind the stream")
			}
			return r.result()
		case <-ctx.Done():
			ec.cancel(ctx, id, "the call was cancelled")
			return nil, ctx.Err()
		}
	}
}

func relayNote(c *worker.Call, note json.RawMessage) {
	var n struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(note, &n) == nil {
		c.Notify(n.Method, n.Params)
	}
}
