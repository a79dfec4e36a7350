package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// Version20260728 is the stateless revision this gateway speaks.
const Version20260728 = mcpspec.Version20260728

// SupportedVersions lists every protocol version served, newest first.
var SupportedVersions = mcpspec.Versions

const instructions = "Tools run on a worker fleet behind mcpcancel; cancelling a call stops it on its worker."

var notifyToolsChanged = jsonrpc.Notification("notifications/tools/list_changed", nil)

func (s *session) handleRequest(ctx context.Context, m *jsonrpc.Message, reply sink) {
	ctx, reply, end := s.observe(ctx, m, reply) // span and duration: trace.go
	defer end()
	params := paramsOf(m)
	if m.Method == "server/discover" || mcpspec.Stateless(params.version()) {
		s.mu.Lock()
		s.rev2026 = true // this client speaks 2026-07-28
		s.mu.Unlock()
	}
	if s.speaks2026() {
		if e, _ := s.precheck(ctx, m); e != nil {
			reply.send(jsonrpc.ErrorResponse(m.ID, true, e))
			return
		}
		s.fanout() // from now on, changes reach this client only on its listens
	}
	if e := s.eventsRefused(m.Method); e != nil { // events.go
		reply.send(jsonrpc.ErrorResponse(m.ID, true, e))
		return
	}
	if m.Method == "subscriptions/listen" { // HTTP serves its own listens
		s.listenStdio(m, reply)
		return
	}
	if isRouted(m.Method) {
		s.handleCall(ctx, m, params, reply)
		return
	}
	result, rpcErr := s.dispatch(ctx, m)
	if rpcErr != nil {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, rpcErr))
		return
	}
	if s.speaks2026() {
		result = complete(m.Method, result)
	}
	reply.send(jsonrpc.Response(m.ID, result))
}

func (s *session) speaks2026() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev2026
}

// complete marks a 2026-07-28 result final, as that revision requires;
// cacheable lists say they must not be cached, since tools come and go.
func complete(method string, result any) any {
	m, ok := result.(map[string]any)
	if !ok {
		m = map[string]any{}
	}
	m["resultType"] = "complete"
	if mcpspec.Cacheable(method) {
		m["ttlMs"], m["cacheScope"] = 0, "private"
	}
	return m
}

// completeRaw adds resultType to a raw result object from a worker, and
// the caching hints of a cacheable method.
func completeRaw(method string, raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return raw
	}
	m["resultType"] = json.RawMessage(`"complete"`)
	if mcpspec.Cacheable(method) {
		m["ttlMs"], m["cacheScope"] = json.RawMessage(`0`), json.RawMessage(`"private"`)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return b
}

func (s *session) dispatch(ctx context.Context, m *jsonrpc.Message) (any, *jsonrpc.Error) {
	switch m.Method {
	case "initialize":
		return s.initialize(ctx, m.Params)
	case "ping":
		return map[string]any{}, nil
	case "tools/list":
		return s.toolsList(ctx)
	case "logging/setLevel":
		return s.setLevel(m.Params)
	case "server/discover":
		return s.discover(ctx), nil
	case "prompts/list", "resources/list", "resources/templates/list", methodEventsList:
		return s.g.listOffers(ctx, m)
	}
	if taskMethods[m.Method] {
		return s.taskMethod(ctx, m)
	}
	return nil, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method not found: %s", m.Method)
}

type initializeParams struct {
	ProtocolVersion string          `json:"protocolVersion"`
	Capabilities    json.RawMessage `json:"capabilities"`
}

// initialize answers with the client's version if we speak it, else our
// latest, as the lifecycle spec asks. It is never cancellable: it is not
// registered as a call, so a cancel naming it finds nothing.
func (s *session) initialize(ctx context.Context, raw json.RawMessage) (any, *jsonrpc.Error) {
	var p initializeParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid initialize params: %v", err)
	}
	v := mcpspec.Negotiate(p.ProtocolVersion)
	s.mu.Lock()
	s.version = v
	s.clientCaps = p.Capabilities
	s.mu.Unlock()
	info, instr := s.g.identity(ctx) // catalogue.go
	return map[string]any{
		"protocolVersion": v,
		"capabilities":    withTasks(s.g.capabilities(ctx)),
		"serverInfo":      info,
		"instructions":    instr,
	}, nil
}

func (g *Gateway) serverInfo() map[string]any {
	return map[string]any{"name": "mcpcancel", "title": "mcpcancel gateway", "version": g.opts.Version}
}

// discover answers 2026-07-28's server/discover.
func (s *session) discover(ctx context.Context) any {
	info, instr := s.g.identity(ctx) // catalogue.go
	return map[string]any{
		"resultType":        "complete",
		"ttlMs":             0,
		"cacheScope":        "private",
		"supportedVersions": SupportedVersions,
		"capabilities":      s.g.withEventsExtension(ctx, withTaskExtension(s.g.capabilities(ctx))),
		"instructions":      instr,
		"_meta":             map[string]any{mcpspec.MetaServerInfo: info},
	}
}

// logs says whether a message at level passes the level the client set
// (everything passes until it sets one).
func (s *session) logs(level string) bool {
	s.mu.Lock()
	set := s.logLevel
	s.mu.Unlock()
	return set == "" && slices.Contains(mcpspec.LogLevels, level) || mcpspec.LevelPasses(level, set)
}

func (s *session) setLevel(raw json.RawMessage) (any, *jsonrpc.Error) {
	var p struct {
		Level string `json:"level"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || !slices.Contains(mcpspec.LogLevels, p.Level) {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "level must be one of %v", mcpspec.LogLevels)
	}
	s.mu.Lock()
	s.logLevel = p.Level
	s.mu.Unlock()
	return map[string]any{}, nil
}

// mcpTool is a tool as tools/list shows it.
type mcpTool struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  json.RawMessage `json:"annotations,omitempty"`
	Execution    *toolExecution  `json:"execution,omitempty"`
	Meta         json.RawMessage `json:"_meta,omitempty"`
}

func (s *session) toolsList(ctx context.Context) (any, *jsonrpc.Error) {
	s.g.awaitCurrent(ctx) // catalogue.go
	tools, err := s.g.listTools(ctx)
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot list tools: the coordinator is unavailable")
	}
	out := make([]mcpTool, 0, len(tools))
	for _, t := range tools {
		in := json.RawMessage(t.GetInputSchemaJson())
		if len(in) == 0 {
			in = json.RawMessage(`{"type":"object"}`)
		}
		out = append(out, mcpTool{
			Name: t.GetName(), Title: t.GetTitle(), Description: t.GetDescription(), InputSchema: in,
			OutputSchema: nonEmpty(t.GetOutputSchemaJson()), Annotations: publicAnnotations(t.GetAnnotationsJson()),
			Execution: execution(t), Meta: toolMeta(t),
		})
	}
	return map[string]any{"tools": out}, nil
}

func nonEmpty(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
