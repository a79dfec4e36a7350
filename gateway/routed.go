package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// The requests a worker answers. Each is a call: registered, begun at the
// coordinator (which places it on a worker serving its target), executed,
// settled exactly once, and cancellable as a tools/call is, in both eras.
// The list methods are not among them: the gateway answers them from its
// catalogue of what live workers offer (catalogue.go).
var routedMethods = []string{
	"tools/call", "resources/read", "resources/subscribe", "resources/unsubscribe",
	"prompts/get", "completion/complete", "events/poll", "events/stream",
}

// isRouted says whether a request is routed to a worker as a call.
func isRouted(method string) bool { return slices.Contains(routedMethods, method) }

// routed is a routed request as the gateway places it.
type routed struct {
	method    string
	target    string          // tool name, resource URI, prompt name, or completion reference
	arguments json.RawMessage // tools/call's arguments
	params    json.RawMessage // the params without _meta, for other methods
	token     json.RawMessage // the client's progress token, if any
	logLevel  string          // 2026-07-28: the request's own log level
}

// Completion references as call targets, as the coordinator reads them.
const (
	refPrompt   = "ref/prompt:"
	refResource = "ref/resource:"
)

// inParams is what the gateway reads of a request's params, decoded once
// per request (handleRequest): the 2026-07-28 protocol version in _meta,
// and a routed request's target, arguments and _meta fields. A decode
// error is kept for the routed request to answer; what decoded stands.
type inParams struct {
	Name      string          `json:"name"`
	URI       string          `json:"uri"`
	Arguments json.RawMessage `json:"arguments"`
	Ref       struct {
		Type string `json:"type"`
		Name string `json:"name"`
		URI  string `json:"uri"`
	} `json:"ref"`
	Meta *inMeta `json:"_meta"`
	// Kept raw, so that a malformed one fails only the layer that reads
	// it: a 2025 task augmentation, a 2026-07-28 retry's answers and state.
	Task           json.RawMessage `json:"task"`
	InputResponses json.RawMessage `json:"inputResponses"`
	RequestState   json.RawMessage `json:"requestState"`

	err  error
	caps map[string]json.RawMessage // _meta's client capabilities, if an object
}

// inMeta is the part of a request's _meta the gateway reads.
type inMeta struct {
	ProgressToken json.RawMessage `json:"progressToken"`
	LogLevel      string          `json:"io.modelcontextprotocol/logLevel"`
	Version       json.RawMessage `json:"io.modelcontextprotocol/protocolVersion"`
	ClientCaps    json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
	Traceparent   json.RawMessage `json:"traceparent"`
	Tracestate    json.RawMessage `json:"tracestate"`
	Baggage       json.RawMessage `json:"baggage"`
}

// paramsOf is m's params as the gateway reads them: the decoding the
// transport kept on the message when it received it (parse), or, for a
// message that did not come through one, a fresh one.
func paramsOf(m *jsonrpc.Message) *inParams {
	if p, ok := m.Parsed.(*inParams); ok {
		return p
	}
	return decodeParams(m.Params)
}

// parse decodes a request's params once, where it enters the gateway,
// and keeps the result on it for every layer below (paramsOf).
func parse(m *jsonrpc.Message) {
	if m.Kind == jsonrpc.KindRequest && m.Parsed == nil {
		m.Parsed = decodeParams(m.Params)
	}
}

// metaString is a _meta value that is a string, or "".
func metaString(raw json.RawMessage) string {
	var v string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
		return ""
	}
	return v
}

// decodeParams decodes a request's params once. Params that are absent,
// not an object, or of the wrong shape keep their error in err.
func decodeParams(raw json.RawMessage) *inParams {
	p := &inParams{}
	p.err = json.Unmarshal(raw, p)
	if p.Meta != nil && len(p.Meta.ClientCaps) > 0 {
		json.Unmarshal(p.Meta.ClientCaps, &p.caps) // nil unless an object
	}
	return p
}

// version is the protocol version the request's _meta names, if it is a
// string; otherwise empty.
func (p *inParams) version() string {
	if p.Meta == nil {
		return ""
	}
	return metaString(p.Meta.Version)
}

// parseRouted reads a routed request's target from its params, decoded
// once by handleRequest.
func parseRouted(m *jsonrpc.Message, p *inParams) (*routed, *jsonrpc.Error) {
	if p.err != nil {
		if m.Method == "tools/call" {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call needs params with a tool name")
		}
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "%s needs params that are an object", m.Method)
	}
	r := &routed{method: m.Method}
	if meta := p.Meta; meta != nil {
		r.logLevel = meta.LogLevel
		if t := meta.ProgressToken; len(t) > 0 && (t[0] == '"' || t[0] == '-' || (t[0] >= '0' && t[0] <= '9')) {
			r.token = t
		}
	}
	switch m.Method {
	case "tools/call":
		r.target, r.arguments = p.Name, p.Arguments
		if r.target == "" {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call needs params with a tool name")
		}
		if a := p.Arguments; len(a) > 0 && string(a) != "null" && a[0] != '{' {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "arguments must be an object")
		}
		return r, nil
	case "prompts/get", "events/poll", "events/stream":
		r.target = p.Name
	case "completion/complete":
		switch p.Ref.Type {
		case "ref/prompt":
			r.target = refPrompt + p.Ref.Name
			if p.Ref.Name == "" {
				r.target = ""
			}
		case "ref/resource":
			r.target = refResource + p.Ref.URI
			if p.Ref.URI == "" {
				r.target = ""
			}
		}
	default: // resources/read, subscribe, unsubscribe
		r.target = p.URI
	}
	if r.target == "" {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "%s needs params with a %s", m.Method, targetWord(m.Method))
	}
	if a := p.Arguments; len(a) > 0 && string(a) != "null" && a[0] != '{' {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "arguments must be an object")
	}
	r.params = m.Params
	if bytes.Contains(m.Params, []byte(`"_meta"`)) { // only then is there anything to drop
		r.params = withoutMeta(m.Params)
	}
	return r, nil
}

func targetWord(method string) string {
	switch method {
	case "prompts/get":
		return "prompt name"
	case "events/poll", "events/stream":
		return "event name"
	case "completion/complete":
		return "ref of type ref/prompt (with a name) or ref/resource (with a uri)"
	}
	return "uri"
}

// withoutMeta drops _meta from params: it is the gateway's to read (the
// protocol version, capabilities, progress token), not the worker's.
func withoutMeta(params json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(params, &m) != nil || m == nil {
		return params
	}
	if _, ok := m["_meta"]; !ok {
		return params
	}
	delete(m, "_meta")
	return rawJSON(m)
}

// beginMethod is the method Begin and Execute carry: the API spells
// tools/call as the empty method (BeginRequest.method).
func (r *routed) beginMethod() string {
	if r.method == "tools/call" {
		return ""
	}
	return r.method
}

// metricName labels the call's metrics: a tool's name, or the method
// (resource URIs and prompt names are not bounded).
func (r *routed) metricName() string {
	if r.method == "tools/call" {
		return r.target
	}
	return r.method
}

// unknown is the error for a target no live worker serves.
func (r *routed) unknown(rev2026 bool) *jsonrpc.Error {
	switch r.method {
	case "tools/call":
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "unknown tool: %s", r.target)
	case "prompts/get":
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "unknown prompt: %q", r.target)
	case "completion/complete":
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "nothing to complete for %s", r.target)
	case "events/poll", "events/stream":
		return eventNotFound(r.target) // events.go
	}
	return resourceNotFound(r.target, rev2026)
}

// resourceNotFound is SEP-2164's error: -32602 in 2026-07-28, the older
// -32002 before, with the URI in data.
func resourceNotFound(uri string, rev2026 bool) *jsonrpc.Error {
	code := jsonrpc.CodeInvalidParams
	if !rev2026 {
		code = mcpspec.CodeResourceNotFound
	}
	data, _ := json.Marshal(map[string]string{"uri": uri})
	return &jsonrpc.Error{Code: code, Message: "Resource not found", Data: data}
}

// answer relays a worker's answer: its result, or the JSON-RPC error its
// handler answered with.
func (c *call) answer(r *pb.ExecuteResult) {
	if e := r.GetErrorJson(); len(e) > 0 {
		var rpcErr jsonrpc.Error
		if json.Unmarshal(e, &rpcErr) != nil || rpcErr.Code == 0 {
			rpcErr = jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the worker answered with an error that does not decode"}
		}
		c.setOutcome(outcomeToolError)
		c.respond(jsonrpc.ErrorResponse(c.id, true, &rpcErr))
		return
	}
	// events.go: an events/stream's result names the client's id.
	raw := c.streamResult(r.GetResultJson())
	if c.method == "tools/call" && r.GetToolError() { // as the worker audited it
		c.setOutcome(outcomeToolError)
	} else {
		c.setOutcome(outcomeCompleted)
	}
	c.respond(c.result(raw))
}

// failure is the answer to a call that failed or was cancelled by someone
// other than its client: a tool error result for tools/call (a tool's
// client reads those), a JSON-RPC internal error for other methods.
func (c *call) failure(format string, args ...any) []byte {
	if c.method == "tools/call" || c.method == "" {
		return c.result(toolError(format, args...))
	}
	return jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInternalError, format, args...))
}

// failedText starts the message of a call whose handler failed.
func (c *call) failedText() string {
	if c.method == "tools/call" || c.method == "" {
		return "the tool failed"
	}
	return fmt.Sprintf("%s %s failed", c.method, c.target)
}
