package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// HTTP header names.
const (
	// HeaderScope names the scope a response's call runs in, so a client
	// can look its calls up in the audit.
	HeaderScope = client.HeaderScope
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
	parse(m) // once, for every layer below
	if v := r.Header.Get(mcpspec.HeaderProtocolVersion); v != "" && !slices.Contains(SupportedVersions, v) {
		writeErrorResponse(w, http.StatusBadRequest, m.ID, m.Kind == jsonrpc.KindRequest, unsupportedVersion(v))
		return
	}
	if !h.admit(w, r, m, principal) {
		return
	}
	if speaks2026(r, m) {
		h.post2026(w, r, m, principal)
		return
	}
	h.post2025(w, r, m, principal)
}

func unsupportedVersion(v string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]any{"supported": SupportedVersions, "requested": v})
	return &jsonrpc.Error{Code: mcpspec.CodeUnsupportedProtocolVersion, Message: "Unsupported protocol version", Data: data}
}

func writeErrorResponse(w http.ResponseWriter, code int, id jsonrpc.ID, hasID bool, e *jsonrpc.Error) {
	w.Header().Set("Content-Type", contentJSON)
	w.WriteHeader(code)
	w.Write(jsonrpc.ErrorResponse(id, hasID, e))
}

// speaks2026 says whether a POST speaks 2026-07-28.
func speaks2026(r *http.Request, m *jsonrpc.Message) bool {
	if r.Header.Get(mcpspec.HeaderProtocolVersion) == Version20260728 {
		return true
	}
	return paramsOf(m).version() == Version20260728
}

// post2025 serves a 2025-era POST.
func (h *httpTransport) post2025(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, principal string) {
	if m.Kind == jsonrpc.KindRequest && m.Method == "initialize" {
		h.initialize(w, r, m, principal)
		return
	}
	s, status := h.lookup(r.Context(), r.Header.Get(mcpspec.HeaderSessionID), principal)
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

// answer serves one request: a call routed to a worker on an SSE stream,
// the rest as JSON.
func (h *httpTransport) answer(w http.ResponseWriter, r *http.Request, s *session, m *jsonrpc.Message) {
	if isRouted(m.Method) && acceptsSSE(r) {
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
