package gateway

import (
	"context"
	"net/http"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

func (h *httpTransport) initialize(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, principal string) {
	id := randid.New(24)
	s := newSession(h.g, client.SessionScope+id, principal)
	_, err := h.g.coord.OpenSession(r.Context(), &pb.OpenSessionRequest{Session: &pb.Session{
		SessionId: id, Principal: principal, ProtocolVersion: mcpspec.Version20251125, Gateway: h.g.opts.Name,
		ClientCapabilitiesJson: initializeCapabilities(m.Params),
	}})
	if err != nil {
		writeErrorResponse(w, http.StatusServiceUnavailable, m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot open a session: the coordinator is unavailable"))
		return
	}
	h.mu.Lock()
	h.evictLocked()
	h.sessions[id] = s
	h.mu.Unlock()
	w.Header().Set(mcpspec.HeaderSessionID, id)
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
		s.clientCaps = resp.GetSession().GetClientCapabilitiesJson()
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
	if r.Header.Get(mcpspec.HeaderSessionID) == "" {
		w.Header().Set("Allow", "POST")
		httpError(w, http.StatusMethodNotAllowed, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "no session: this endpoint has no stream without one"))
		return
	}
	s, status := h.lookup(r.Context(), r.Header.Get(mcpspec.HeaderSessionID), principal)
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

// delete ends a session: its calls on every replica are cancelled, once
// each. CloseSession refuses the session's new calls on every replica and
// cancels its running ones, audited as the client's disconnect, and names
// those it cancelled: their gates close here without another Cancel. The
// rest were settled otherwise, or are not begun yet (their Begin meets the
// closed session, or a Begin whose reply is on its way was cancelled with
// the others), and get a Cancel each, which wins only if nothing settled
// them; a coordinator that names no calls leaves every call to that.
func (h *httpTransport) delete(w http.ResponseWriter, r *http.Request, principal string) {
	id := r.Header.Get(mcpspec.HeaderSessionID)
	s, status := h.lookup(r.Context(), id, principal)
	if s == nil {
		httpError(w, status, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "unknown session"))
		return
	}
	const reason = "session deleted by the client"
	s.setLeft(true) // before the close, which may cancel its calls through their workers
	resp, err := h.g.coord.CloseSession(r.Context(), &pb.CloseSessionRequest{SessionId: id, Principal: s.principal, Reason: reason})
	if err != nil && !client.Is(err, client.ErrUnknownCall) {
		s.setLeft(false)
		httpError(w, http.StatusServiceUnavailable, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot close the session: the coordinator is unavailable"))
		return
	}
	rest := closeWon(s.inboundCalls(), resp.GetCallIds(), pb.Initiator_INITIATOR_DISCONNECT, reason)
	cancelEach(rest, pb.Initiator_INITIATOR_DISCONNECT, reason)
	h.mu.Lock()
	delete(h.sessions, id)
	h.mu.Unlock()
	s.setNotifier(nil)
	w.WriteHeader(http.StatusOK)
}
