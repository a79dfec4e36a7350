package gateway

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// discard is a sink that keeps nothing.
type discard struct{}

func (discard) send([]byte) bool               { return true }
func (discard) sendLatest(string, []byte) bool { return true }
func (discard) streams() bool                  { return true }
func (discard) flush()                         {}

// observeOnce is what observing one answered tools/call costs the gateway.
func observeOnce(s *session, m *jsonrpc.Message, resp []byte) {
	ctx, reply, end := s.observe(context.Background(), m, discard{})
	reply.send(resp)
	observeOutcome(ctx, outcomeCompleted)
	end()
}

func benchObserve(b *testing.B) {
	g := &Gateway{}
	g.metrics = newMetrics(g)
	s := newSession(g, "session:bench", "alice")
	m := &jsonrpc.Message{Kind: jsonrpc.KindRequest, ID: jsonrpc.Int(7), Method: "tools/call",
		Params: []byte(`{"name":"echo","arguments":{"text":"hi"},"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`)}
	resp := jsonrpc.Response(m.ID, map[string]any{"content": []any{}})
	b.ReportAllocs()
	for b.Loop() {
		observeOnce(s, m, resp)
	}
}

// BenchmarkObserveUntraced is the per-request cost with no OTEL_* set:
// the duration histogram only.
func BenchmarkObserveUntraced(b *testing.B) { benchObserve(b) }

// BenchmarkObserveTraced adds a sampled span per request, with no
// exporter (the exporter's own cost is not the gateway's).
func BenchmarkObserveTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider() // spans are made, sampled, and dropped at their end
	defer telemetry.Install(tp)()
	benchObserve(b)
}
