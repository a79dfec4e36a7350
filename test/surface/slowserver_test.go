package surface

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The slow server is this test binary run again as an MCP server on
// stdio (TestMain runs it when slowServerEnv names a log file): it offers
// one resource, slow://resource, whose read never ends by itself. It logs
// "read started" when a read begins, "cancelled <requestId>" for every
// notifications/cancelled it receives, and "read stopped" when the read's
// context ends: what the test asserts the upstream was told.
const slowServerEnv = "MCPCANCEL_SURFACE_SLOW_SERVER_LOG"

const slowURI = "slow://resource"

func runSlowServer(logFile string) int {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 1
	}
	defer f.Close()
	var mu sync.Mutex
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, format+"\n", args...)
		f.Sync()
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "slow", Version: "1"}, nil)
	s.AddResource(&mcp.Resource{URI: slowURI, Name: "slow", MIMEType: "text/plain"},
		func(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			logf("read started")
			<-ctx.Done()
			logf("read stopped")
			return nil, ctx.Err()
		})
	err = s.Run(context.Background(), &loggedTransport{Transport: &mcp.StdioTransport{}, logf: logf})
	if err != nil {
		return 1
	}
	return 0
}

// loggedTransport logs the notifications/cancelled the server reads.
type loggedTransport struct {
	mcp.Transport
	logf func(string, ...any)
}

func (t *loggedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &loggedConn{Connection: c, logf: t.logf}, nil
}

type loggedConn struct {
	mcp.Connection
	logf func(string, ...any)
}

func (c *loggedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && r.Method == "notifications/cancelled" {
		c.logf("cancelled %s", r.Params)
	}
	return m, err
}
