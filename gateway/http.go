package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// HTTP header names.
const (
	hdrSession = "Mcp-Session-Id"
	hdrVersion = "Mcp-Protocol-Version"
	hdrMethod  = "Mcp-Method"
	hdrName    = "Mcp-Name"
	// HeaderScope names the scope a response's call runs in, so a client
	// can look its calls up in the audit.
	HeaderScope = "Mcpcancel-Scope"
	contentJSON = "application/json"
	contentSSE  = "text/event-stream"
)

// Handler returns the Streamable HTTP handler for the MCP endpoint. It
// serves the 2025 revisions (sessions, GET stream, DELETE) and 2026-07-28
// (stateless; closing a request's stream cancels it) side by side.
func (g *Gateway) Handler() http.Handler {
	return &httpTransport{g: g, sessions: map[string]*session{}, guard: newGuard(g.opts.Auth)}
}

type httpTransport struct {
	g     *Gateway
	guard *guard // authorisation and rate limits (oauth.go)

	mu       sync.Mutex
	sessions map[string]*session // 2025 sessions this replica has seen
}

func (h *httpTransport) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.originAllowed(r) {
		httpError(w, http.StatusForbidden, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "origin %q is not allowed", r.Header.Get("Origin")))
		return
	}
	principal, r, ok := h.principalOf(w, r)
	if !ok {
		return
	}
	switch r.Method {
	case http.MethodPost:
		h.post(w, r, principal)
	case http.MethodGet:
		h.get(w, r, principal)
	case http.MethodDelete:
		h.delete(w, r, principal)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		httpError(w, http.StatusMethodNotAllowed, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "method %s not allowed", r.Method))
	}
}

// originAllowed guards against DNS rebinding: a browser's Origin must be
// loopback or explicitly allowed. Requests without Origin (non-browser
// clients) pass.
func (h *httpTransport) originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	if slices.Contains(h.g.opts.AllowedOrigins, o) {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func httpError(w http.ResponseWriter, code int, e *jsonrpc.Error) {
	w.Header().Set("Content-Type", contentJSON)
	w.WriteHeader(code)
	w.Write(jsonrpc.ErrorResponse(jsonrpc.ID{}, false, e))
}

func (h *httpTransport) post(w http.ResponseWriter, r *http.Request, principal string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, h.g.opts.MaxMessageBytes+1))
	if err != nil {
		return
	}
	if int64(len(body)) > h.g.opts.MaxMessageBytes {
		httpError(w, http.StatusRequestEntityTooLarge, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "message larger than %d bytes", h.g.opts.MaxMessageBytes))
		return
	}
	m, derr := jsonrpc.Decode(body)
	if derr != nil {
		writeErrorResponse(w, http.StatusBadRequest, derr.ID, derr.HasID, derr.Error)
		return
	}
	if v := r.Header.Get(hdrVersion); v != "" && !slices.Contains(SupportedVersions, v) {
		writeErrorResponse(w, http.StatusBadRequest, m.ID, m.Kind == jsonrpc.KindRequest, unsupportedVersion(v))
		return
	}
	if !h.admit(w, r, m, principal) {
		return
	}
	if isModern(r, m) {
		h.postModern(w, r, m, principal)
		return
	}
	h.postLegacy(w, r, m, principal)
}

func unsupportedVersion(v string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]any{"supported": SupportedVersions, "requested": v})
	return &jsonrpc.Error{Code: jsonrpc.CodeUnsupportedVersion, Message: "Unsupported protocol version", Data: data}
}

func writeErrorResponse(w http.ResponseWriter, code int, id jsonrpc.ID, hasID bool, e *jsonrpc.Error) {
	w.Header().Set("Content-Type", contentJSON)
	w.WriteHeader(code)
	w.Write(jsonrpc.ErrorResponse(id, hasID, e))
}

// isModern says whether a POST speaks 2026-07-28.
func isModern(r *http.Request, m *jsonrpc.Message) bool {
	if r.Header.Get(hdrVersion) == Version20260728 {
		return true
	}
	return metaProtocolVersion(m.Params) == Version20260728
}

func metaProtocolVersion(params json.RawMessage) string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	var v string
	json.Unmarshal(p.Meta[metaVersion], &v)
	return v
}

// postLegacy serves a 2025-era POST.
func (h *httpTransport) postLegacy(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, principal string) {
	if m.Kind == jsonrpc.KindRequest && m.Method == "initialize" {
		h.initialize(w, r, m, principal)
		return
	}
	s, status := h.lookup(r.Context(), r.Header.Get(hdrSession), principal)
	if s == nil {
		writeErrorResponse(w, status, m.ID, m.Kind == jsonrpc.KindRequest, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "%s", http.StatusText(status)+": initialize a session first"))
		return
	}
	if m.Kind != jsonrpc.KindRequest {
		s.handle(r.Context(), m, nil)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set(HeaderScope, s.scope)
	h.answer(w, r, s, m)
}

// answer serves one request: tools/call on an SSE stream, the rest as JSON.
func (h *httpTransport) answer(w http.ResponseWriter, r *http.Request, s *session, m *jsonrpc.Message) {
	if m.Method == "tools/call" && acceptsSSE(r) {
		out := h.g.newSSE(w)
		defer out.close()
		s.handleOnStream(r.Context(), m, out, false) // a dropped 2025 POST stream is no cancellation
		return
	}
	out := &jsonSink{}
	s.handle(r.Context(), m, out)
	if !out.writeTo(w, h.g.opts.WriteTimeout) {
		w.WriteHeader(http.StatusAccepted)
	}
}

// handleOnStream handles one request answered on out. A client that stops
// reading the stream is cut off, and its request cancelled as a
// disconnect (nothing can answer it any more). With closeCancels
// (2026-07-28), closing the stream is the client's own cancellation.
func (s *session) handleOnStream(ctx context.Context, m *jsonrpc.Message, out *sseSink, closeCancels bool) {
	var closed <-chan struct{}
	if closeCancels {
		closed = ctx.Done()
	}
	done := make(chan struct{})
	go func() { // owned: ends when the request does, and we wait for it
		defer close(done)
		select {
		case <-closed:
			s.cancelRequest(m.ID, pb.Initiator_INITIATOR_CLIENT, "request stream closed")
		case <-out.cut:
			s.cancelRequest(m.ID, pb.Initiator_INITIATOR_DISCONNECT, "the client stopped reading its stream")
		case <-out.finished:
		}
	}()
	s.handle(ctx, m, out)
	out.finish()
	<-done
}

func acceptsSSE(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), contentSSE)
}

func (h *httpTransport) initialize(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, principal string) {
	id := randomToken(24)
	s := newSession(h.g, client.SessionScope+id, principal)
	_, err := h.g.coord.OpenSession(r.Context(), &pb.OpenSessionRequest{Session: &pb.Session{
		SessionId: id, Principal: principal, ProtocolVersion: latestLegacy, Gateway: h.g.opts.Name,
	}})
	if err != nil {
		writeErrorResponse(w, http.StatusServiceUnavailable, m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot open a session: the coordinator is unavailable"))
		return
	}
	h.mu.Lock()
	h.evictLocked()
	h.sessions[id] = s
	h.mu.Unlock()
	w.Header().Set(hdrSession, id)
	w.Header().Set(HeaderScope, s.scope)
	out := &jsonSink{}
	s.handle(r.Context(), m, out)
	out.writeTo(w, h.g.opts.WriteTimeout)
}

// lookup finds a session by id: here, or recorded by another replica. A
// session of another principal is as good as unknown.
func (h *httpTransport) lookup(ctx context.Context, id, principal string) (*session, int) {
	if id == "" {
		return nil, http.StatusBadRequest
	}
	h.mu.Lock()
	s := h.sessions[id]
	h.mu.Unlock()
	if s != nil {
		if s.principal != principal {
			return nil, http.StatusNotFound
		}
		return s, 0
	}
	resp, err := h.g.coord.GetSession(ctx, &pb.GetSessionRequest{SessionId: id})
	switch {
	case client.Is(err, client.ErrUnknownCall), client.Is(err, client.ErrInvalidArgument):
		return nil, http.StatusNotFound
	case err != nil:
		return nil, http.StatusServiceUnavailable
	case resp.GetSession().GetPrincipal() != principal:
		return nil, http.StatusNotFound
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s = h.sessions[id]; s == nil {
		h.evictLocked()
		s = newSession(h.g, client.SessionScope+id, principal)
		s.version = resp.GetSession().GetProtocolVersion()
		h.sessions[id] = s
	}
	return s, 0
}

// maxCachedSessions bounds the sessions a replica keeps in memory. The
// map is a cache: etcd has every session, so an evicted one is fetched
// again on its next request.
const maxCachedSessions = 10000

// evictLocked drops idle sessions (no calls, no open stream) once the
// cache is full.
func (h *httpTransport) evictLocked() {
	if len(h.sessions) < maxCachedSessions {
		return
	}
	for id, s := range h.sessions {
		if s.idle() {
			delete(h.sessions, id)
		}
	}
}

// get opens a session's stream for server-initiated messages.
func (h *httpTransport) get(w http.ResponseWriter, r *http.Request, principal string) {
	if !acceptsSSE(r) {
		httpError(w, http.StatusNotAcceptable, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "GET needs Accept: text/event-stream"))
		return
	}
	if r.Header.Get(hdrSession) == "" {
		w.Header().Set("Allow", "POST")
		httpError(w, http.StatusMethodNotAllowed, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "no session: this endpoint has no stream without one"))
		return
	}
	s, status := h.lookup(r.Context(), r.Header.Get(hdrSession), principal)
	if s == nil {
		httpError(w, status, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "unknown session"))
		return
	}
	out := h.g.newSSE(w)
	defer out.close()
	s.setNotifier(out)
	defer func() {
		s.mu.Lock()
		mine := s.notifier == out
		s.mu.Unlock()
		if mine {
			s.setNotifier(nil)
		}
	}()
	ctx, stop := whileReading(r.Context(), out.outbox)
	defer stop()
	defer context.AfterFunc(h.g.base, stop)()
	s.pingLoop(ctx, h.g.opts.PingInterval)
	<-ctx.Done()
}

// whileReading returns a context that ends with ctx, or when out's client
// is cut off for not reading; stop ends it and waits for its watcher.
func whileReading(ctx context.Context, out *outbox) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned: stop waits for it
		defer close(done)
		select {
		case <-out.cut:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(); <-done }
}

// delete ends a session: its calls on every replica are cancelled.
func (h *httpTransport) delete(w http.ResponseWriter, r *http.Request, principal string) {
	id := r.Header.Get(hdrSession)
	s, status := h.lookup(r.Context(), id, principal)
	if s == nil {
		httpError(w, status, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "unknown session"))
		return
	}
	s.setLeft(true) // before the close, which may cancel its calls through their workers
	_, err := h.g.coord.CloseSession(r.Context(), &pb.CloseSessionRequest{SessionId: id, Principal: s.principal, Reason: "session deleted by the client"})
	if err != nil && !client.Is(err, client.ErrUnknownCall) {
		s.setLeft(false)
		httpError(w, http.StatusServiceUnavailable, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot close the session: the coordinator is unavailable"))
		return
	}
	s.cancelAll(pb.Initiator_INITIATOR_DISCONNECT, "session deleted by the client")
	h.mu.Lock()
	delete(h.sessions, id)
	h.mu.Unlock()
	s.setNotifier(nil)
	w.WriteHeader(http.StatusOK)
}

// postModern serves a 2026-07-28 POST: no session; the request is its own
// scope, and closing its response stream cancels it.
func (h *httpTransport) postModern(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, principal string) {
	if m.Kind != jsonrpc.KindRequest {
		w.WriteHeader(http.StatusAccepted) // no client notifications in this revision; nothing to do
		return
	}
	if e := h.g.checkHeaders(r, m); e != nil {
		writeErrorResponse(w, http.StatusBadRequest, m.ID, true, e)
		return
	}
	s := newSession(h.g, client.StreamScope+randomToken(16), principal)
	s.modern = true
	if e, status := s.precheck(r.Context(), m); e != nil {
		writeErrorResponse(w, status, m.ID, true, e)
		return
	}
	w.Header().Set(HeaderScope, s.scope)
	if m.Method == "subscriptions/listen" {
		h.listen(w, r, s, m)
		return
	}
	if m.Method != "tools/call" || !acceptsSSE(r) {
		out := &jsonSink{notFound: true}
		s.handle(r.Context(), m, out)
		out.writeTo(w, h.g.opts.WriteTimeout)
		return
	}
	out := h.g.newSSE(w)
	defer out.close()
	s.handleOnStream(r.Context(), m, out, true)
}

// jsonSink answers one request with a JSON body. It keeps the one
// response; the handler writes it once the request is settled.
type jsonSink struct {
	mu  sync.Mutex
	msg []byte
	// notFound answers -32601 with 404, as 2026-07-28 asks.
	notFound   bool
	methodGone bool
}

func (j *jsonSink) send(msg []byte) bool {
	var probe struct {
		ID    json.RawMessage `json:"id"`
		Error *jsonrpc.Error  `json:"error"`
	}
	if json.Unmarshal(msg, &probe) != nil || probe.ID == nil {
		return false // only the response belongs here; notifications are dropped
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.msg != nil {
		return false
	}
	j.msg = msg
	j.methodGone = probe.Error != nil && probe.Error.Code == jsonrpc.CodeMethodNotFound
	return true
}

func (j *jsonSink) sendLatest(string, []byte) bool { return false }

// flush does nothing: the handler writes the response once the request
// returns.
func (j *jsonSink) flush() {}

// writeTo writes the response, if there is one, within timeout; it
// reports whether there was.
func (j *jsonSink) writeTo(w http.ResponseWriter, timeout time.Duration) bool {
	j.mu.Lock()
	msg, gone := j.msg, j.methodGone
	j.mu.Unlock()
	if msg == nil {
		return false
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout))
	w.Header().Set("Content-Type", contentJSON)
	if j.notFound && gone {
		w.WriteHeader(http.StatusNotFound)
	}
	w.Write(msg)
	return true
}

// sseSink streams messages as Server-Sent Events through an outbox. The
// handler must close it before it returns: the ResponseWriter is not to
// be used after.
type sseSink struct {
	*outbox
	finished chan struct{}
	once     sync.Once
}

// newSSE sends the stream's headers at once (so the client learns the
// scope before any event) and starts its writer.
func (g *Gateway) newSSE(w http.ResponseWriter) *sseSink {
	h := w.Header()
	h.Set("Content-Type", contentSSE)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Now().Add(g.opts.WriteTimeout))
	w.WriteHeader(http.StatusOK)
	rc.Flush()
	return &sseSink{
		outbox:   newOutbox(&sseWriter{w: w, rc: rc}, g.opts.WriteTimeout, g.outboxLimit()),
		finished: make(chan struct{}),
	}
}

// sseWriter writes events to one HTTP response, each batch within its
// deadline, flushed once.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sseWriter) write(batch [][]byte, deadline time.Time) error {
	s.rc.SetWriteDeadline(deadline)
	for _, msg := range batch {
		if _, err := fmt.Fprintf(s.w, "event: message\ndata: %s\n\n", msg); err != nil {
			return err
		}
	}
	return s.rc.Flush()
}

func (s *sseWriter) abandonable() bool { return false }

// finish marks the stream done: nothing more will be written.
func (s *sseSink) finish() { s.once.Do(func() { close(s.finished) }) }

// listen serves 2026-07-28's subscriptions/listen: a long-lived stream
// carrying the change notifications the client opted in to. The gateway
// has one kind to offer, notifications/tools/list_changed.
func (h *httpTransport) listen(w http.ResponseWriter, r *http.Request, s *session, m *jsonrpc.Message) {
	var p struct {
		Notifications struct {
			ToolsListChanged bool `json:"toolsListChanged"`
		} `json:"notifications"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		writeErrorResponse(w, http.StatusBadRequest, m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid subscriptions/listen params"))
		return
	}
	out := h.g.newSSE(w)
	defer out.close()
	tagged := &listenSink{out: out, id: rawJSON(m.ID)}
	granted := map[string]any{}
	if p.Notifications.ToolsListChanged {
		granted["toolsListChanged"] = true
	}
	tagged.send(jsonrpc.Notification("notifications/subscriptions/acknowledged", map[string]any{"notifications": granted}))
	if p.Notifications.ToolsListChanged {
		s.setNotifier(tagged)
		defer s.setNotifier(nil)
	}
	select {
	case <-r.Context().Done():
	case <-out.cut:
	case <-h.g.base.Done():
		out.send(jsonrpc.Response(m.ID, listenResult(m.ID)))
	}
}
