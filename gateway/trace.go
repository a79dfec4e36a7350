package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/telemetry"
)

// tracerName names the gateway's spans' instrumentation scope.
const tracerName = "github.com/mcpcancel/mcpcancel/gateway"

// Attribute keys of the MCP semantic conventions, and mcpcancel's own.
const (
	attrMethod      = "mcp.method.name"
	attrSession     = "mcp.session.id"
	attrVersion     = "mcp.protocol.version"
	attrRequestID   = "jsonrpc.request.id"
	attrToolName    = "gen_ai.tool.name"
	attrPromptName  = "gen_ai.prompt.name"
	attrOperation   = "gen_ai.operation.name"
	attrResourceURI = "mcp.resource.uri"
	attrTransport   = "network.transport"
	attrErrorType   = "error.type"
	attrStatusCode  = "rpc.response.status_code"
	attrCallID      = "mcpcancel.call.id"
	attrWorker      = "mcpcancel.worker"
	attrOutcome     = "mcpcancel.outcome"
)

// knownMethods are the MCP methods the duration histogram names; any
// other is counted as "_OTHER", so a client cannot grow its label set.
var knownMethods = []string{
	"initialize", "ping", "tools/list", "tools/call", "prompts/list", "prompts/get",
	"resources/list", "resources/templates/list", "resources/read", "resources/subscribe",
	"resources/unsubscribe", "completion/complete", "logging/setLevel", "server/discover",
	"subscriptions/listen", "tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "tasks/update",
	"events/list", "events/poll", "events/stream",
}

// observed is one MCP request as traced and measured, from its arrival
// to its end (answered, or settled unanswered). It wraps the request's
// sink to see the request's own error response, which gives error.type.
type observed struct {
	sink
	method    string
	start     time.Time
	errPrefix []byte     // how this request's error response begins
	span      trace.Span // nil when the process does not trace
	metrics   *metrics

	mu      sync.Mutex
	errType string
}

type observedKey struct{}

// observe starts observing request m: the span (when tracing), parented
// by the client's _meta trace context, and the clock of the duration
// histogram. The returned sink is m's reply, watched; end finishes both.
func (s *session) observe(ctx context.Context, m *jsonrpc.Message, reply sink) (context.Context, sink, func()) {
	id, _ := json.Marshal(m.ID)
	o := &observed{
		sink: reply, method: m.Method, start: time.Now(), metrics: s.g.metrics,
		errPrefix: append(append([]byte(`{"jsonrpc":"2.0","id":`), id...), `,"error":`...),
	}
	if telemetry.Enabled() {
		ctx = s.startSpan(ctx, m, o)
	}
	return context.WithValue(ctx, observedKey{}, o), o, o.end
}

// startSpan starts m's server span, named "{mcp.method.name} {target}".
func (s *session) startSpan(ctx context.Context, m *jsonrpc.Message, o *observed) context.Context {
	p := paramsOf(m) // a span for a request whose params are bad, too
	carrier := propagation.MapCarrier{}
	if meta := p.Meta; meta != nil {
		for k, raw := range map[string]json.RawMessage{"traceparent": meta.Traceparent, "tracestate": meta.Tracestate, "baggage": meta.Baggage} {
			if v := metaString(raw); v != "" {
				carrier[k] = v
			}
		}
	}
	// The client's _meta parents the span; without it the span is a root
	// (the HTTP request's context, if any, covers many MCP messages).
	parent := telemetry.Propagator().Extract(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), carrier)
	attrs := []attribute.KeyValue{attribute.String(attrMethod, m.Method), attribute.String(attrRequestID, idString(m.ID))}
	name := m.Method
	switch m.Method {
	case "tools/call":
		attrs = append(attrs, attribute.String(attrToolName, p.Name), attribute.String(attrOperation, "execute_tool"))
		name += " " + p.Name
	case "prompts/get":
		attrs = append(attrs, attribute.String(attrPromptName, p.Name))
		name += " " + p.Name
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		attrs = append(attrs, attribute.String(attrResourceURI, p.URI))
	}
	attrs = append(attrs, s.spanAttributes(m)...)
	ctx, o.span = telemetry.Tracer(tracerName).Start(parent, strings.TrimSpace(name),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return ctx
}

// spanAttributes are the session's: its id, version and transport.
func (s *session) spanAttributes(m *jsonrpc.Message) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	if id, ok := strings.CutPrefix(s.scope, client.SessionScope); ok {
		attrs = append(attrs, attribute.String(attrSession, id))
	}
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	if v == "" {
		v = paramsOf(m).version()
	}
	if v != "" {
		attrs = append(attrs, attribute.String(attrVersion, v))
	}
	transport := "tcp"
	if strings.HasPrefix(s.scope, client.ConnScope) {
		transport = "pipe"
	}
	return append(attrs, attribute.String(attrTransport, transport))
}

func idString(id jsonrpc.ID) string {
	if id.IsString() {
		return id.Str()
	}
	return strconv.FormatInt(id.Num(), 10)
}

// send notes the request's error response, if msg is it.
func (o *observed) send(msg []byte) bool {
	if bytes.HasPrefix(msg, o.errPrefix) {
		var e struct {
			Error struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(msg, &e) == nil {
			code := strconv.Itoa(e.Error.Code)
			o.setError(code)
			if o.span != nil {
				o.span.SetAttributes(attribute.String(attrStatusCode, code))
			}
		}
	}
	return o.sink.send(msg)
}

// setError records the request's error.type; the first one stays.
func (o *observed) setError(t string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.errType == "" {
		o.errType = t
	}
}

// end finishes the span and records the duration.
func (o *observed) end() {
	o.mu.Lock()
	errType := o.errType
	o.mu.Unlock()
	method := o.method
	if !slices.Contains(knownMethods, method) {
		method = "_OTHER"
	}
	o.metrics.operation(method, errType, time.Since(o.start))
	if o.span == nil {
		return
	}
	if errType != "" {
		o.span.SetAttributes(attribute.String(attrErrorType, errType))
		o.span.SetStatus(codes.Error, errType)
	}
	o.span.End()
}

func observedFrom(ctx context.Context) *observed {
	o, _ := ctx.Value(observedKey{}).(*observed)
	return o
}

// requestSpan is ctx's request span, or nil when it is not traced.
func requestSpan(ctx context.Context) trace.Span {
	if o := observedFrom(ctx); o != nil {
		return o.span
	}
	return nil
}

// observeOutcome records how a tools/call ended, once its gate closed: an
// event on its span, and error.type unless it completed. A JSON-RPC error
// the call was answered with stays its error.type.
func observeOutcome(ctx context.Context, outcome string) {
	o := observedFrom(ctx)
	if o == nil || outcome == "" {
		return
	}
	if outcome != outcomeCompleted {
		o.setError(outcome)
	}
	if o.span != nil {
		o.span.AddEvent("mcpcancel.gate.closed", trace.WithAttributes(attribute.String(attrOutcome, outcome)))
	}
}

// traced is ctx carrying the call's request span, so that the gRPC calls
// made for the call (Begin, Execute, Cancel, Fail) join the client's trace.
func (c *call) traced(ctx context.Context) context.Context {
	if c.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, c.span)
}

// placed notes on the call's span which worker Begin placed it on.
func (c *call) placed(begun *pb.BeginResponse) {
	if c.span == nil {
		return
	}
	c.span.AddEvent("mcpcancel.placed", trace.WithAttributes(
		attribute.String(attrCallID, begun.GetCallId()), attribute.String(attrWorker, begun.GetWorker())))
}
