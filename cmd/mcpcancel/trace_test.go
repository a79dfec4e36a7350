package main

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// The client's trace context, as a client puts it in _meta.
const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
	traceparent   = "00-" + clientTraceID + "-" + clientSpanID + "-01"
)

// receiver is an OTLP/gRPC trace receiver: what an OpenTelemetry
// Collector listens with, keeping every span it is sent.
type receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []*span
}

// span is one received span with the scope that emitted it.
type span struct {
	scope string
	*tracepb.Span
}

func (r *receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, &span{ss.GetScope().GetName(), s})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *receiver) received() []*span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*span(nil), r.spans...)
}

// startReceiver serves a receiver on a loopback port the kernel picks.
func startReceiver(t *testing.T) *receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(lis) }() // ends with Stop below
	t.Cleanup(func() { srv.Stop(); <-done })
	return r
}

// component names the part of mcpcancel a span comes from, "" if none.
func (s *span) component() string {
	switch {
	case s.scope == "github.com/mcpcancel/mcpcancel/gateway":
		return "gateway"
	case s.scope == "github.com/mcpcancel/mcpcancel/worker",
		s.Kind == tracepb.Span_SPAN_KIND_SERVER && strings.HasPrefix(s.Name, "mcpcancel.v1.WorkerService/"):
		return "worker"
	case s.Kind == tracepb.Span_SPAN_KIND_SERVER && strings.HasPrefix(s.Name, "mcpcancel.v1.CoordinatorService/"):
		return "coordinator"
	}
	return ""
}

func attr(kvs []*commonpb.KeyValue, key string) (*commonpb.AnyValue, bool) {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue(), true
		}
	}
	return nil, false
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	v, _ := attr(kvs, key)
	return v.GetStringValue()
}

// event is s's first event named name, or nil.
func (s *span) event(name string) *tracepb.Span_Event {
	for _, e := range s.GetEvents() {
		if e.GetName() == name {
			return e
		}
	}
	return nil
}

// TestTraceOfCancelledCall runs `mcpcancel dev` exporting over OTLP/gRPC
// to a real receiver. A client calls sleep with _meta.traceparent and
// cancels it. Exactly one trace crosses gateway, coordinator and worker:
// the client's; its gateway span is the client span's child and carries
// the MCP conventions' attributes; the coordinator's Cancel span holds
// the decision (cancelled, by the client, won); the worker's handler span
// notes its stop; and the audit record names the trace.
func TestTraceOfCancelledCall(t *testing.T) {
	r := startReceiver(t)
	p := start(t, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.addr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_TRACES_EXPORTER=",
	}, "dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0")
	coordAddr := p.waitLine(t, "coordinator: ")
	url := p.waitLine(t, "mcp: ")

	progressed := make(chan struct{}, 1)
	c := mcp.NewClient(&mcp.Implementation{Name: "trace-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		},
	})
	// A 2025-era session, so the span has a session id to name.
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	params := &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"seconds": 30, "steps": 300}}
	params.SetProgressToken("p")
	params.Meta["traceparent"] = traceparent
	errc := make(chan error, 1)
	go func() { _, err := cs.CallTool(ctx, params); errc <- err }()
	<-progressed
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("sleep = %v, want cancelled", err)
	}

	client := pb.NewCoordinatorServiceClient(dialTest(t, coordAddr))
	var rec *pb.AuditRecord
	poll(t, "the cancelled record with its stop", func() bool {
		resp, err := client.ListAudit(t.Context(), &pb.ListAuditRequest{Outcome: "cancelled"})
		if err != nil || len(resp.GetRecords()) != 1 || resp.GetRecords()[0].GetStoppedAt() == nil {
			return false
		}
		rec = resp.GetRecords()[0]
		return true
	})
	if rec.GetTraceId() != clientTraceID {
		t.Errorf("audit record trace_id = %q, want the client's %s", rec.GetTraceId(), clientTraceID)
	}
	out, err := command("audit", "list", "--json", "--coordinator", coordAddr, "--outcome", "cancelled").Output()
	if err != nil || !strings.Contains(string(out), `"trace_id":"`+clientTraceID+`"`) {
		t.Errorf("audit list --json = %s, %v; want the record's trace_id %s", out, err, clientTraceID)
	}
	cs.Close()
	p.signal(t, syscall.SIGTERM) // the spans still queued are flushed at exit
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("dev exited %d after SIGTERM", code)
	}

	spans := r.received()
	traces := map[string]map[string][]*span{} // trace id → component → spans
	for _, s := range spans {
		id := hex.EncodeToString(s.GetTraceId())
		if traces[id] == nil {
			traces[id] = map[string][]*span{}
		}
		traces[id][s.component()] = append(traces[id][s.component()], s)
	}
	var crossing []string
	for id, byPart := range traces {
		if len(byPart["gateway"]) > 0 && len(byPart["coordinator"]) > 0 && len(byPart["worker"]) > 0 {
			crossing = append(crossing, id)
		}
	}
	if len(crossing) != 1 || crossing[0] != clientTraceID {
		t.Fatalf("traces crossing gateway, coordinator and worker: %v, want only the client's %s (%d spans received)", crossing, clientTraceID, len(spans))
	}
	trace := traces[clientTraceID]
	checkGatewaySpan(t, trace["gateway"], rec.GetCallId())
	checkDecision(t, trace["coordinator"], rec.GetCallId())
	checkWorkerSpans(t, trace["worker"])
}

func checkGatewaySpan(t *testing.T, spans []*span, callID string) {
	t.Helper()
	if len(spans) != 1 {
		t.Fatalf("%d gateway spans in the trace, want 1", len(spans))
	}
	g := spans[0]
	if g.Name != "tools/call sleep" || g.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("gateway span %q kind %v, want \"tools/call sleep\", server", g.Name, g.Kind)
	}
	if got := hex.EncodeToString(g.GetParentSpanId()); got != clientSpanID {
		t.Errorf("gateway span's parent = %s, want the client's span %s", got, clientSpanID)
	}
	for key, want := range map[string]string{
		"mcp.method.name": "tools/call", "gen_ai.tool.name": "sleep", "mcp.protocol.version": "2025-11-25",
		"error.type": "cancelled", "network.transport": "tcp",
	} {
		if got := attrString(g.GetAttributes(), key); got != want {
			t.Errorf("gateway span %s = %q, want %q", key, got, want)
		}
	}
	for _, key := range []string{"jsonrpc.request.id", "mcp.session.id"} {
		if attrString(g.GetAttributes(), key) == "" {
			t.Errorf("gateway span has no %s: %v", key, g.GetAttributes())
		}
	}
	placed := g.event("mcpcancel.placed")
	if placed == nil || attrString(placed.GetAttributes(), "mcpcancel.call.id") != callID || attrString(placed.GetAttributes(), "mcpcancel.worker") != "dev-worker" {
		t.Errorf("gateway span's placement event = %v, want call %s on dev-worker", placed, callID)
	}
}

// checkDecision finds the decision event on the coordinator's spans: one,
// on Cancel, cancelled by the client, and it won.
func checkDecision(t *testing.T, spans []*span, callID string) {
	t.Helper()
	var decisions []*tracepb.Span_Event
	var on []string
	placed := false
	for _, s := range spans {
		for _, e := range s.GetEvents() {
			switch e.GetName() {
			case "mcpcancel.decision":
				// A settle attempt that lost records its event too: the
				// worker's Cancel when it saw its stream end before the
				// stop order (issue 18's extra Cancel). One may win.
				if won, _ := attr(e.GetAttributes(), "mcpcancel.decision.won"); !won.GetBoolValue() {
					continue
				}
				decisions, on = append(decisions, e), append(on, s.Name)
			case "mcpcancel.placed":
				placed = (s.Name == "mcpcancel.v1.CoordinatorService/Start" || s.Name == "mcpcancel.v1.CoordinatorService/Begin") &&
					attrString(e.GetAttributes(), "mcpcancel.worker") == "dev-worker"
			}
		}
	}
	if !placed {
		t.Errorf("no placement event on the coordinator's Start (or Begin) span")
	}
	if len(decisions) != 1 || on[0] != "mcpcancel.v1.CoordinatorService/Cancel" {
		t.Fatalf("winning decision events on %v, want one on Cancel", on)
	}
	d := decisions[0].GetAttributes()
	won, _ := attr(d, "mcpcancel.decision.won")
	if attrString(d, "mcpcancel.outcome") != "cancelled" || attrString(d, "mcpcancel.initiator") != "client" ||
		!won.GetBoolValue() || attrString(d, "mcpcancel.call.id") != callID {
		t.Errorf("decision event %v, want call %s cancelled by the client, won", d, callID)
	}
}

func checkWorkerSpans(t *testing.T, spans []*span) {
	t.Helper()
	var handler, execute *span
	for _, s := range spans {
		switch s.Name {
		case "execute_tool sleep":
			handler = s
		case "mcpcancel.v1.WorkerService/Execute":
			execute = s
		}
	}
	if handler == nil || execute == nil {
		t.Fatalf("worker spans %d, want the Execute span and the handler's", len(spans))
	}
	if string(handler.GetParentSpanId()) != string(execute.GetSpanId()) {
		t.Errorf("the handler's span is not the Execute span's child")
	}
	stopped := handler.event("mcpcancel.handler.stopped")
	if stopped == nil || attrString(stopped.GetAttributes(), "mcpcancel.handler.cause") != "stop_order" && attrString(stopped.GetAttributes(), "mcpcancel.handler.cause") != "caller_gone" {
		t.Errorf("handler span's stop event = %v, want one with the stop's cause", stopped)
	}
}

// TestConsoleTraces runs `OTEL_TRACES_EXPORTER=console mcpcancel dev`:
// the spans of a call appear on stderr as they end, with the client's
// trace id.
func TestConsoleTraces(t *testing.T) {
	p := start(t, []string{"OTEL_TRACES_EXPORTER=console"},
		"dev", "--http", "127.0.0.1:0", "--coordinator-listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0")
	url := p.waitLine(t, "mcp: ")
	c := mcp.NewClient(&mcp.Implementation{Name: "trace-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "traced"}, Meta: mcp.Meta{"traceparent": traceparent}}
	if _, err := cs.CallTool(t.Context(), params); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name":"tools/call echo"`, `"Name":"execute_tool echo"`, `"Name":"mcpcancel.v1.CoordinatorService/Complete"`} {
		poll(t, "a console span "+want+" in the client's trace", func() bool {
			for _, l := range p.linesFrom(0) {
				if strings.Contains(l, want) && strings.Contains(l, `"TraceID":"`+clientTraceID+`"`) {
					return true
				}
			}
			return false
		})
	}
}
