package gateway

import (
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// Run: go test ./gateway -run '^$' -bench 'RequestParams|Answer' -count 6
//
// The per-call work of the gateway's hot path apart from the network:
// reading a request's params on its way to Begin, and relaying the
// worker's result to the client.

var benchCall = &jsonrpc.Message{Kind: jsonrpc.KindRequest, ID: jsonrpc.Int(7), Method: "tools/call",
	Params: []byte(`{"name":"echo","arguments":{"text":"a short line of text to echo back"},"_meta":{"progressToken":7}}`)}

// BenchmarkRequestParams is what handleRequest and handleCall spend
// reading a tools/call's params: the protocol version, then the target.
// (Before the params were decoded once, this was metaProtocolVersion and
// then parseRouted, each decoding them.)
func BenchmarkRequestParams(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		p := decodeParams(benchCall.Params)
		if p.version() == Version20260728 {
			b.Fatal("not a 2026-07-28 request")
		}
		if _, err := parseRouted(benchCall, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnswer relays a worker's echo result through the gate, in
// each era's form; tooled is the 2025 form from a worker that says
// whether the result is a tool error (tool_error), as workers do since.
func BenchmarkAnswer(b *testing.B) {
	body := []byte(`{"content":[{"type":"text","text":"a short line of text to echo back"}],"structuredContent":{"text":"a short line of text to echo back"}}`)
	no := false
	for _, era := range []struct {
		name    string
		rev2026 bool
		res     *pb.ExecuteResult
	}{
		{"2025", false, &pb.ExecuteResult{ResultJson: body}},
		{"2026", true, &pb.ExecuteResult{ResultJson: body}},
		{"2025-tooled", false, &pb.ExecuteResult{ResultJson: body, ToolError: &no}},
	} {
		b.Run(era.name, func(b *testing.B) {
			g := &Gateway{}
			g.metrics = newMetrics(g)
			s := newSession(g, "conn:bench", "alice")
			b.ReportAllocs()
			for b.Loop() {
				c := &call{s: s, id: jsonrpc.Int(7), method: "tools/call", reply: discard{}, rev2026: era.rev2026}
				c.answer(era.res)
				if !c.settled() {
					b.Fatal("the gate did not close")
				}
			}
		})
	}
}
