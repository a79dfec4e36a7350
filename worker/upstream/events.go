package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
	"github.com/mcpcancel/mcpcancel/worker"
)

// The events extension (SEP-3415, io.modelcontextprotocol/events) of a
// fronted server. When the server's capabilities declare it, the adapter
// lists its event types (events/list, every page) and offers them with
// its prompts and resources; events/poll and events/stream are then
// forwarded like any request: with the adapter's own request id,
// cancelled when the call is.
//
// The SDK the adapter speaks MCP with knows nothing of the extension, so
// its requests go beside the SDK's session, on an eventsLink: over stdio
// on the connection under the SDK (eventsConn, events_stdio.go), over
// Streamable HTTP as POSTs of their own to the server's endpoint
// (eventsHTTP, events_http.go). Either way a request of ours is an
// eventsRequest, which the code below sends, waits for and cancels
// without knowing the transport.
//
// A stream's notifications are queued for its call, whose handler relays
// them in order: no connection's reader waits on a client. A client that
// falls more than maxQueuedEvents behind has its stream ended (the
// server is told it is cancelled), not the connection stalled.

const (
	eventsIDPrefix  = "mcpcancel-events-"
	maxQueuedEvents = 1024
	// cancelWait bounds telling the server of a cancel.
	cancelWait = 5 * time.Second
)

// errEventsGone means the connection closed under a request.
var errEventsGone = errors.New("the connection to the server closed")

// eventsLink sends the extension's requests to one upstream session.
type eventsLink interface {
	// send sends a request with an id of the adapter's own; stream says
	// whether it opens a stream, whose notifications the request queues.
	send(ctx context.Context, method string, params json.RawMessage, stream bool) (*eventsRequest, error)
}

// eventsRequest is one request of ours in flight.
type eventsRequest struct {
	notes chan *jsonrpc.Request // a stream's notifications
	done  chan struct{}         // closed once resp, err or overflow is set
	once  sync.Once

	resp     *jsonrpc.Response
	err      error
	overflow bool

	// cancel tells the server that we gave the request up, for reason;
	// it returns within cancelWait.
	cancel func(ctx context.Context, reason string)
}

func newEventsRequest(stream bool) *eventsRequest {
	r := &eventsRequest{done: make(chan struct{})}
	if stream {
		r.notes = make(chan *jsonrpc.Request, maxQueuedEvents)
	}
	return r
}

func (r *eventsRequest) end(resp *jsonrpc.Response, err error, overflow bool) {
	r.once.Do(func() {
		r.resp, r.err, r.overflow = resp, err, overflow
		close(r.done)
	})
}

// answered says whether the server answered the request.
func (r *eventsRequest) answered() bool {
	select {
	case <-r.done:
		return r.resp != nil
	default:
		return false
	}
}

// isEventsNote says whether m is a notification of a stream.
func isEventsNote(m *jsonrpc.Request) bool {
	return !m.IsCall() && strings.HasPrefix(m.Method, "notifications/events/")
}

// note queues a stream's notification for its call, never waiting; a
// full queue ends the request.
func (r *eventsRequest) note(m *jsonrpc.Request) {
	if r.notes == nil {
		return // not a stream
	}
	select {
	case r.notes <- m:
	default:
		r.end(nil, nil, true)
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

// callEvents sends a request and waits for its result; the server's
// JSON-RPC error is returned as it is.
func callEvents(ctx context.Context, l eventsLink, method string, params json.RawMessage) (json.RawMessage, error) {
	r, err := l.send(ctx, method, params, false)
	if err != nil {
		return nil, err
	}
	select {
	case <-r.done:
		return r.result()
	case <-ctx.Done():
		r.cancel(ctx, "the call was cancelled")
		return nil, ctx.Err()
	}
}

// eventsConns finds the eventsLink beside a session.
type eventsConns struct {
	mu sync.Mutex
	m  map[*mcp.ClientSession]eventsLink // guarded by mu
}

func (e *eventsConns) add(s *mcp.ClientSession, l eventsLink) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[*mcp.ClientSession]eventsLink{}
	}
	e.m[s] = l
}

func (e *eventsConns) of(s *mcp.ClientSession) eventsLink {
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
	l := a.events.of(s)
	if l == nil {
		return nil, nil // a session that is closing
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
		raw, err := callEvents(ctx, l, "events/list", params)
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

// forwardEvents forwards events/poll or events/stream. A stream holds no
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
	s, done, err := a.requestSession(ctx, c)
	if err != nil {
		return nil, err
	}
	var upErr error
	defer func() { done(upErr) }()
	l := a.events.of(s)
	if l == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + c.Method}
	}
	var res json.RawMessage
	if c.Method == worker.MethodEventsPoll {
		res, err = callEvents(ctx, l, c.Method, c.Params)
	} else {
		res, err = stream(ctx, l, c)
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
func stream(ctx context.Context, l eventsLink, c *worker.Call) (json.RawMessage, error) {
	r, err := l.send(ctx, c.Method, c.Params, true)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case n := <-r.notes:
			c.Notify(n.Method, n.Params)
		case <-r.done:
			for len(r.notes) > 0 { // what the server sent before it ended
				n := <-r.notes
				c.Notify(n.Method, n.Params)
			}
			if r.overflow {
				r.cancel(ctx, "the client fell behind the stream")
			}
			return r.result()
		case <-ctx.Done():
			r.cancel(ctx, "the call was cancelled")
			return nil, ctx.Err()
		}
	}
}
