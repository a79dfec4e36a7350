package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// The rules of 2026-07-28 that apply to a request before it is handled:
// the _meta envelope every request carries, the methods that revision
// removed, and the client capabilities a tool needs.

// annotationRequires is the key, in a worker tool's annotations, of the
// client capabilities (a ClientCapabilities object) the tool needs. The
// gateway refuses a 2026-07-28 call of the tool from a client that did
// not declare them, before any work starts, and never shows the key to
// clients.
const annotationRequires = "io.mcpcancel/requiredClientCapabilities"

// envelope is the part of a request's _meta that 2026-07-28 defines.
type envelope struct {
	version  string
	caps     map[string]json.RawMessage
	hasMeta  bool
	hasCaps  bool
	logLevel string
}

func envelopeOf(p *inParams) envelope {
	var e envelope
	if p.Meta == nil {
		return e
	}
	e.hasMeta = true
	e.version, e.logLevel = p.version(), p.Meta.LogLevel
	e.caps, e.hasCaps = p.caps, p.caps != nil
	return e
}

// check says what is wrong with the envelope, if anything: a request
// missing a required field is malformed (-32602).
func (e envelope) check() *jsonrpc.Error {
	switch {
	case !e.hasMeta:
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: a 2026-07-28 request needs _meta with %s and %s", mcpspec.MetaProtocolVersion, mcpspec.MetaClientCapabilities)
	case e.version == "":
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: _meta needs %s", mcpspec.MetaProtocolVersion)
	case !e.hasCaps:
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: _meta needs %s (an object)", mcpspec.MetaClientCapabilities)
	case e.logLevel != "" && !slices.Contains(mcpspec.LogLevels, e.logLevel):
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "Invalid params: _meta log level must be one of %v", mcpspec.LogLevels)
	}
	return nil
}

// precheck applies the rules a 2026-07-28 request must pass before it is
// handled. It returns the error to answer and the HTTP status to answer
// it with, or nil.
func (s *session) precheck(ctx context.Context, m *jsonrpc.Message) (*jsonrpc.Error, int) {
	params := paramsOf(m)
	env := envelopeOf(params)
	if e := env.check(); e != nil {
		return e, http.StatusBadRequest
	}
	// A removed method is -32601, and 404 over HTTP.
	if slices.Contains(mcpspec.RemovedIn20260728, m.Method) {
		return jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "Method not found: %s was removed in %s", m.Method, Version20260728), http.StatusNotFound
	}
	if m.Method == "tools/call" {
		if e := s.missingCapabilities(ctx, params.Name, env.caps); e != nil {
			return e, http.StatusBadRequest
		}
	}
	return nil, 0
}

// missingCapabilities answers a call of a tool that needs client
// capabilities the request did not declare.
func (s *session) missingCapabilities(ctx context.Context, tool string, declared map[string]json.RawMessage) *jsonrpc.Error {
	t := s.g.knownTool(ctx, tool)
	if t == nil {
		return nil
	}
	missing := map[string]json.RawMessage{}
	for name, v := range requiredCapabilities(t) {
		if _, ok := declared[name]; !ok {
			missing[name] = v
		}
	}
	if len(missing) == 0 {
		return nil
	}
	names := make([]string, 0, len(missing))
	for n := range missing {
		names = append(names, n)
	}
	slices.Sort(names)
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": missing})
	return &jsonrpc.Error{
		Code:    mcpspec.CodeMissingRequiredClientCapability,
		Message: "Missing required client capability: tool " + tool + " needs " + strings.Join(names, ", "),
		Data:    data,
	}
}

// knownTool finds a tool that live workers offer; nil if none does (or
// the coordinator cannot say, when the call fails on its own).
func (g *Gateway) knownTool(ctx context.Context, name string) *pb.Tool {
	tools, err := g.listTools(ctx)
	if err != nil {
		return nil
	}
	for _, tool := range tools {
		if tool.GetName() == name {
			return tool
		}
	}
	return nil
}

// requiredCapabilities reads the client capabilities a tool needs from
// its annotations.
func requiredCapabilities(t *pb.Tool) map[string]json.RawMessage {
	var a map[string]json.RawMessage
	if json.Unmarshal(t.GetAnnotationsJson(), &a) != nil {
		return nil
	}
	var req map[string]json.RawMessage
	json.Unmarshal(a[annotationRequires], &req)
	return req
}

// publicAnnotations are a tool's annotations as clients see them: without
// the gateway's own key; nil if nothing else is left.
func publicAnnotations(raw []byte) json.RawMessage {
	var a map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &a) != nil {
		return nonEmpty(raw)
	}
	if _, ok := a[annotationRequires]; !ok {
		return raw
	}
	delete(a, annotationRequires)
	if len(a) == 0 {
		return nil
	}
	b, _ := json.Marshal(a)
	return b
}

// listenSink tags every message of one subscriptions/listen stream with
// the subscription's id (the listen request's id), as 2026-07-28 asks.
type listenSink struct {
	out sink
	id  json.RawMessage
}

func (l *listenSink) send(msg []byte) bool { return l.out.send(tagSubscription(msg, l.id)) }

func (l *listenSink) flush() { l.out.flush() }

func (l *listenSink) sendLatest(key string, msg []byte) bool {
	return l.out.sendLatest(key, tagSubscription(msg, l.id))
}

func (l *listenSink) streams() bool { return true }

// tagSubscription returns a copy of a notification with
// params._meta[subscriptionId] set; other messages pass unchanged.
func tagSubscription(msg []byte, id json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil || m["method"] == nil || m["id"] != nil {
		return msg
	}
	var params map[string]json.RawMessage
	json.Unmarshal(m["params"], &params)
	if params == nil {
		params = map[string]json.RawMessage{}
	}
	var meta map[string]json.RawMessage
	json.Unmarshal(params["_meta"], &meta)
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta[mcpspec.MetaSubscriptionID] = id
	params["_meta"] = rawJSON(meta)
	m["params"] = rawJSON(params)
	return rawJSON(m)
}

func rawJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of valid raw JSON reach here
	}
	return b
}

// listenResult is the result that ends a subscriptions/listen stream the
// server closes: complete, and tagged like every message of the stream.
func listenResult(id jsonrpc.ID) map[string]any {
	return map[string]any{
		"resultType": "complete",
		"_meta":      map[string]any{mcpspec.MetaSubscriptionID: rawJSON(id)},
	}
}

// post2026 serves a 2026-07-28 POST: no session; the request is its own
// scope, and closing its response stream cancels it.
func (h *httpTransport) post2026(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, principal string) {
	if m.Kind != jsonrpc.KindRequest {
		w.WriteHeader(http.StatusAccepted) // no client notifications in this revision; nothing to do
		return
	}
	if e := h.g.checkHeaders(r, m); e != nil {
		writeErrorResponse(w, http.StatusBadRequest, m.ID, true, e)
		return
	}
	s := newSession(h.g, client.StreamScope+randid.New(16), principal)
	s.rev2026 = true
	if e, status := s.precheck(r.Context(), m); e != nil {
		writeErrorResponse(w, status, m.ID, true, e)
		return
	}
	w.Header().Set(HeaderScope, s.scope)
	if m.Method == "subscriptions/listen" {
		h.listen(w, r, s, m)
		return
	}
	if !isRouted(m.Method) || !acceptsSSE(r) {
		out := &jsonSink{notFound: true}
		s.handle(r.Context(), m, out)
		out.writeTo(w, h.g.opts.WriteTimeout)
		return
	}
	out := h.g.newSSE(w)
	defer out.close()
	s.handleOnStream(r.Context(), m, out, true)
}

// listen serves 2026-07-28's subscriptions/listen: a long-lived stream
// carrying what the client opted in to (listen.go): tools, prompts and
// resources list_changed; notifications/resources/updated for the
// resources it named, subscribed for the stream's life
// (listensubs.go); notifications/tasks for the tasks it named
// (listentasks.go).
func (h *httpTransport) listen(w http.ResponseWriter, r *http.Request, s *session, m *jsonrpc.Message) {
	lr, err := parseListen(m.Params)
	if err != nil {
		writeErrorResponse(w, http.StatusBadRequest, m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid subscriptions/listen params: %v", err))
		return
	}
	if e := listenTasksAllowed(lr, paramsOf(m)); e != nil {
		writeErrorResponse(w, http.StatusBadRequest, m.ID, true, e)
		return
	}
	ctx := r.Context()
	principal := s.principal
	wants := newListenWants(lr.kinds)
	wants.tasks = s.knownTasks(ctx, lr.tasks)
	wants.uris = s.subscribeURIs(ctx, lr.uris, h.mayListen(ctx, principal))
	defer s.unsubscribeURIs(wants.uris)
	out := h.g.newSSE(w)
	defer out.close()
	tagged := &listenSink{out: out, id: rawJSON(m.ID)}
	filter := &listenFilter{out: tagged, wants: wants}
	if !wants.empty() {
		s.setNotifier(filter)
		defer s.setNotifier(nil)
	}
	filter.ack(jsonrpc.Notification("notifications/subscriptions/acknowledged", acknowledgement(lr, wants)))
	stopTasks := s.followTasks(ctx, wants.tasks, filter)
	defer stopTasks()
	select {
	case <-ctx.Done():
	case <-out.cut:
	case <-h.g.base.Done():
		out.send(jsonrpc.Response(m.ID, listenResult(m.ID)))
	}
}
