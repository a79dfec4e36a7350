package worker_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// A worker serving a resource, a resource template, a prompt and their
// completions, until interrupted. Each handler's context ends the moment
// its call is cancelled (by its client, a timeout, an operator), as a
// tool's does: the slow report stops at once.
func ExampleWorker_HandleResource() {
	w := worker.New(worker.Options{Coordinator: "127.0.0.1:7801"})
	w.HandleResource(&worker.Resource{URI: "report://daily", Name: "daily", MIMEType: "text/plain"},
		func(ctx context.Context, c *worker.Call) (*mcp.ReadResourceResult, error) {
			select {
			case <-time.After(5 * time.Second): // building the report
			case <-ctx.Done():
				return nil, ctx.Err() // cancelled: nothing goes out
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
				{URI: c.URI(), MIMEType: "text/plain", Text: "all systems nominal"},
			}}, nil
		})
	w.HandleResourceTemplate(&worker.ResourceTemplate{URITemplate: "users://{id}/profile", Name: "profile", MIMEType: "application/json"},
		func(_ context.Context, c *worker.Call) (*mcp.ReadResourceResult, error) {
			id := strings.TrimSuffix(strings.TrimPrefix(c.URI(), "users://"), "/profile")
			if id == "" {
				return nil, mcp.ResourceNotFoundError(c.URI()) // the client's answer, a JSON-RPC error
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
				{URI: c.URI(), MIMEType: "application/json", Text: fmt.Sprintf(`{"id":%q}`, id)},
			}}, nil
		})
	w.HandlePrompt(&worker.Prompt{Name: "greet", Description: "Greets someone.", Arguments: []*mcp.PromptArgument{{Name: "name", Required: true}}},
		func(_ context.Context, c *worker.Call) (*mcp.GetPromptResult, error) {
			var a struct{ Name string }
			if err := c.Bind(&a); err != nil {
				return nil, err
			}
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.TextContent{Text: "Say hello to " + a.Name + "."}},
			}}, nil
		})
	w.HandleCompletion(func(_ context.Context, c *worker.Call) (*mcp.CompleteResult, error) {
		var p mcp.CompleteParams
		if err := c.BindParams(&p); err != nil {
			return nil, err
		}
		var values []string
		for _, n := range []string{"Ada", "Alan", "Grace"} {
			if strings.HasPrefix(n, p.Argument.Value) {
				values = append(values, n)
			}
		}
		return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values}}, nil
	})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := w.Run(ctx, lis); err != nil {
		log.Fatal(err)
	}
}

// A worker relaying another server's answers registers everything at
// once, with one handler that tells the methods apart.
func ExampleWorker_SetOffers() {
	w := worker.New(worker.Options{Coordinator: "127.0.0.1:7801"})
	w.SetOffers(worker.Offers{
		Resources: []*worker.Resource{{URI: "file:///etc/motd", Name: "motd"}},
		Prompts:   []*worker.Prompt{{Name: "summarise"}},
	}, func(ctx context.Context, c *worker.Call) (any, error) {
		switch c.Method {
		case worker.MethodResourcesRead:
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: c.URI(), Text: "hello"}}}, nil
		case worker.MethodPromptsGet:
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Summarise the motd."}}}}, nil
		}
		return nil, fmt.Errorf("%s is not served here", c.Method)
	})
	_ = w // Run it as in the example of HandleResource.
}
