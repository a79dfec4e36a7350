package upstream_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mcpcancel/mcpcancel/internal/telemetry"
	"github.com/mcpcancel/mcpcancel/worker/upstream"
)

// TestTraceContextReachesUpstream: with tracing on, the tools/call the
// fronted server (server-everything, over stdio) receives carries the
// client's trace in _meta.traceparent, under the worker's handler span.
func TestTraceContextReachesUpstream(t *testing.T) {
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const clientSpan = "00f067aa0ba902b7"
	defer telemetry.Install(sdktrace.NewTracerProvider())() // before the stack, so its gRPC hops trace
	cmd, tp := stdioEverything(t)
	st := startStack(t, upstream.Options{Command: cmd}, "echo")
	s := connect(t, st.url)
	p := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "traced"},
		Meta: mcp.Meta{"traceparent": "00-" + traceID + "-" + clientSpan + "-01"}}
	if res, err := s.CallTool(t.Context(), p); err != nil || res.IsError {
		t.Fatalf("echo = %+v, %v", res, err)
	}
	b, err := os.ReadFile(tp.file)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "in ")
		if !ok {
			continue
		}
		var m struct {
			Method string
			Params struct {
				Name string
				Meta map[string]any `json:"_meta"`
			}
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Method == "tools/call" && m.Params.Name == "echo" {
			got, _ = m.Params.Meta["traceparent"].(string)
		}
	}
	parts := strings.Split(got, "-")
	if len(parts) != 4 || parts[1] != traceID || parts[2] == clientSpan {
		t.Fatalf("upstream traceparent = %q, want trace %s under a span of mcpcancel's", got, traceID)
	}
}
