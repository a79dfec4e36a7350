package upstream_test

import (
	"context"
	"fmt"
	"os"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"

	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// A fronted server built on a widely used third-party SDK, mark3labs'
// mcp-go: its stdio server writes notifications from a goroutine of
// their own, so its result may reach the wire before the progress its
// tool sent first.

// mcpgoServerEnv, when set, makes the test binary run mcpgoServer on
// stdio instead of the tests.
const mcpgoServerEnv = "UPSTREAM_TEST_MCPGO_SERVER"

// mcpgoServer has burst {n}: n progress notifications, then its result.
func mcpgoServer() *mcpgoserver.MCPServer {
	s := mcpgoserver.NewMCPServer(fixtureName, fixtureVersion)
	s.AddTool(mcpgo.NewTool("burst", mcpgo.WithDescription("progress, n times, then the result"), mcpgo.WithNumber("n")),
		func(ctx context.Context, req mcpgo.CallToolRequest) (*mcpgo.CallToolResult, error) {
			n := req.GetInt("n", 0)
			if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
				srv := mcpgoserver.ServerFromContext(ctx)
				for i := 1; i <= n; i++ {
					srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": i, "total": n})
				}
			}
			return mcpgo.NewToolResultText(fmt.Sprintf("burst %d", n)), nil
		})
	return s
}

func runMcpgoServer() int {
	if err := mcpgoserver.ServeStdio(mcpgoServer()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// mcpgoStdio fronts the mcp-go server over stdio.
func mcpgoStdio() upstream.Options {
	return upstream.Options{Command: []string{os.Args[0]}, Env: []string{mcpgoServerEnv + "=1"}}
}
