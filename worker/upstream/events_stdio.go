package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// The events extension over stdio: the adapter's requests go on the
// connection under the SDK, with ids of the adapter's own that the SDK
// never sees, and their responses and the streams' notifications are
// taken off the wire before the SDK reads it. A cancel is
// notifications/cancelled.

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

var _ eventsLink = (*eventsConn)(nil)

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
		if !isEventsNote(m) {
			return false
		}
		c.note(m)
		return true
	}
	return false
}

// note queues a stream's notification for the request its _meta names.
func (c *eventsConn) note(m *jsonrpc.Request) {
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	json.Unmarshal(m.Params, &p)
	id, _ := p.Meta[mcpspec.MetaSubscriptionID].(string)
	c.mu.Lock()
	r := c.open[id]
	c.mu.Unlock()
	if r != nil { // else a stream that ended, or not ours
		r.note(m)
	}
}

func (c *eventsConn) remove(id string) *eventsRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.open[id]
	delete(c.open, id)
	return r
}

// send writes a request of ours.
func (c *eventsConn) send(ctx context.Context, method string, params json.RawMessage, stream bool) (*eventsRequest, error) {
	id := fmt.Sprintf("%s%d", eventsIDPrefix, c.next.Add(1))
	r := newEventsRequest(stream)
	r.cancel = func(ctx context.Context, reason string) { c.cancel(ctx, id, reason) }
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errEventsGone
	}
	c.open[id] = r
	c.mu.Unlock()
	jid, _ := jsonrpc.MakeID(id)
	if err := c.Connection.Write(ctx, &jsonrpc.Request{ID: jid, Method: method, Params: params}); err != nil {
		c.remove(id)
		return nil, err
	}
	return r, nil
}

// cancel tells the server that we gave up our request id.
func (c *eventsConn) cancel(ctx context.Context, id, reason string) {
	if c.remove(id) == nil {
		return // answered meanwhile
	}
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), cancelWait)
	defer stop()
	c.Connection.Write(ctx, cancelledNote(id, reason))
}

// cancelledNote is notifications/cancelled for our request id.
func cancelledNote(id, reason string) *jsonrpc.Request {
	params, _ := json.Marshal(map[string]string{"requestId": id, "reason": reason})
	return &jsonrpc.Request{Method: "notifications/cancelled", Params: params}
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
