package upstream

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// inWireOrder wraps a stdio transport so that the adapter relays each
// progress notification from the connection's read loop, in the order it
// arrived. The SDK hands a response to its caller as soon as it is read
// but queues notifications for a handler goroutine, so progress the server
// sent just before its result could otherwise reach the relay after the
// call returned and its route closed: the client's progress bar would end
// short of its total.
//
// Only transports whose connections have no hooks of their own may be
// wrapped: the SDK's streamable HTTP connection has an unexported one
// (it learns the negotiated version) that a wrapper would hide.
type inWireOrder struct {
	mcp.Transport
	progress func(*mcp.ProgressNotificationParams)
}

func (t inWireOrder) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &orderedConn{Connection: c, progress: t.progress}, nil
}

type orderedConn struct {
	mcp.Connection
	progress func(*mcp.ProgressNotificationParams)
}

// Read relays a progress notification before returning it, so it is
// relayed before any message read after it is seen by anyone.
func (c *orderedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if req, ok := m.(*jsonrpc.Request); ok && !req.IsCall() && req.Method == "notifications/progress" {
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(req.Params, &p) == nil {
			c.progress(&p)
		}
	}
	return m, err
}
