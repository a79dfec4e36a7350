package demo

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/mcpcancel/mcpcancel/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run calls tool's handler directly, as the worker runtime would.
func run(ctx context.Context, tool, args string) (*worker.Result, error) {
	h := map[string]worker.Handler{"sleep": sleep, "echo": echo, "spin": spin}[tool]
	return h(ctx, &worker.Call{Tool: tool, Arguments: json.RawMessage(args)})
}

// text is the one text block of a successful result.
func text(t *testing.T, r *worker.Result, err error) string {
	t.Helper()
	if err != nil {
		t.Fatalf("handler error: %v", err)
	}
	if r.IsError {
		t.Fatalf("tool error result: %+v", r.Content)
	}
	return onlyText(t, r)
}

func onlyText(t *testing.T, r *worker.Result) string {
	t.Helper()
	if len(r.Content) != 1 {
		t.Fatalf("want one content block, got %d", len(r.Content))
	}
	tc, ok := r.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("want text content, got %T", r.Content[0])
	}
	return tc.Text
}

func TestEcho(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{`{"text":"hi"}`, "hi"},
		{`{"text":""}`, ""},
		{`{"text":"line\nbreak ✓"}`, "line\nbreak ✓"},
	} {
		t.Run(tc.args, func(t *testing.T) {
			r, err := run(t.Context(), "echo", tc.args)
			if got := text(t, r, err); got != tc.want {
				t.Errorf("echo = %q, want %q", got, tc.want)
			}
		})
	}
}
