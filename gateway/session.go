package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// sink is where messages for a client go: a stdio connection, a POST's
// response stream, or a session's notification stream. A sink only
// queues, never waiting on the network, so callers may hold a lock. send
// reports whether the message was queued; sendLatest queues it in place
// of an unwritten message under the same key (progress coalesces).
type sink interface {
	send(msg []byte) bool
	sendLatest(key string, msg []byte) bool
	// flush returns once what was queued is written, or cannot be.
	flush()
	// streams says whether messages besides the one response reach the
	// client (a stream), so a request toward it can be asked there; a
	// JSON response carries the response alone.
	streams() bool
}

// session is one scope: a stdio connection, a 2025 HTTP session, or a
// single 2026-07-28 HTTP request. It keeps the requests the client sent
// (inbound) apart from those the gateway sent it (outbound).
type session struct {
	g         *Gateway
	scope     string
	principal string
	rev2026   bool // 2026-07-28: no initialize, no notifications over HTTP

	mu          sync.Mutex
	inbound     map[string]*call
	outbound    map[string]chan *jsonrpc.Message
	childByID   map[string]*outReq // requests toward the client for calls (outbound.go)
	clientCaps  json.RawMessage    // the capabilities the client declared in initialize
	notifier    sink               // server-initiated messages; nil when the client cannot hear them
	version     string
	logLevel    string
	nextOut     int64
	initialized bool
	gone        bool          // the client itself left (stdio EOF, DELETE): it waits for nothing
	lookups     lookupLimiter // remote lookups for cancels that named no local call
	// arriving holds the requests read but not yet registered or answered
	// (stdio dispatches each on its own goroutine); a client's cancel that
	// names one waits here for the call to register.
	arriving map[string]*cancelOrder
}

func newSession(g *Gateway, scope, principal string) *session {
	return &session{
		g: g, scope: scope, principal: principal,
		inbound: map[string]*call{}, outbound: map[string]chan *jsonrpc.Message{},
	}
}

// setNotifier sets (or clears, with nil) where server notifications go.
func (s *session) setNotifier(k sink) {
	s.mu.Lock()
	s.notifier = k
	s.mu.Unlock()
	if k != nil {
		s.g.addSession(s)
	} else {
		s.g.removeSession(s)
	}
}

func (s *session) notify(msg []byte) bool {
	s.mu.Lock()
	k := s.notifier
	s.mu.Unlock()
	return k != nil && k.send(msg)
}

// handle processes one message from the client. Requests are answered on
// reply; handle returns when the request is answered or settled.
func (s *session) handle(ctx context.Context, m *jsonrpc.Message, reply sink) {
	switch m.Kind {
	case jsonrpc.KindNotification:
		s.handleNotification(m)
	case jsonrpc.KindResponse:
		s.handleResponse(m)
	case jsonrpc.KindRequest:
		s.handleRequest(ctx, m, reply)
	}
}

func (s *session) handleNotification(m *jsonrpc.Message) {
	switch m.Method {
	case "notifications/cancelled":
		// A held call's cancel is decided before the POST is answered; a
		// lookup, which may wait for a record on its way (another
		// replica's call), is not.
		s.clientCancelled(m.Params, func(f func()) { f() }, func(f func()) { s.g.spawn(&s.g.lookups, f) })
	case "notifications/initialized":
		s.mu.Lock()
		s.initialized = true
		s.mu.Unlock()
	}
	// Every other notification is ignored, as the spec asks.
}

// handleResponse matches a client's answer to a request the gateway sent.
func (s *session) handleResponse(m *jsonrpc.Message) {
	s.mu.Lock()
	ch := s.outbound[m.ID.Key()]
	delete(s.outbound, m.ID.Key())
	s.mu.Unlock()
	if ch != nil {
		ch <- m
		return
	}
	s.answered(m) // a call's request toward the client (outbound.go)
}

// remoteCalls says whether another replica may run calls of this scope:
// only 2025 HTTP sessions span replicas.
func (s *session) remoteCalls() bool {
	return strings.HasPrefix(s.scope, client.SessionScope)
}

// idle says whether the session holds no call and no stream.
func (s *session) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inbound) == 0 && s.notifier == nil
}

// register records a request before any remote work starts. It returns
// the client's cancel that arrived before the call was registered, if any.
func (s *session) register(c *call) (early *cancelOrder, err *jsonrpc.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.inbound[c.id.Key()]; dup {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "request id %s is already in flight", c.idText())
	}
	if len(s.inbound) >= s.g.opts.ScopeLimit {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "too many calls in flight in this session (limit %d); wait for one to finish", s.g.opts.ScopeLimit)
	}
	if s.g.inflight.Add(1) > int64(s.g.opts.GlobalLimit) {
		s.g.inflight.Add(-1)
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the gateway is at its limit of %d calls in flight; try again shortly", s.g.opts.GlobalLimit)
	}
	if !s.g.track(c) {
		s.g.inflight.Add(-1)
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the gateway is shutting down; try another replica")
	}
	s.inbound[c.id.Key()] = c
	early = s.arriving[c.id.Key()]
	delete(s.arriving, c.id.Key())
	return early, nil
}

// setLeft records whether the client itself ended its connection or
// session: then a disconnect of its calls is its own doing, like a
// cancel, and answers nothing.
func (s *session) setLeft(left bool) {
	s.mu.Lock()
	s.gone = left
	s.mu.Unlock()
}

// hasLeft says whether the client itself ended its connection or session.
func (s *session) hasLeft() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// cancelRequest cancels the client's request id, if this replica holds it.
func (s *session) cancelRequest(id jsonrpc.ID, who pb.Initiator, reason string) {
	s.mu.Lock()
	c := s.inbound[id.Key()]
	s.mu.Unlock()
	if c != nil {
		c.requestCancel(who, reason)
	}
}

func (s *session) unregister(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inbound[c.id.Key()] == c {
		delete(s.inbound, c.id.Key())
		s.g.untrack(c)
		s.g.inflight.Add(-1)
	}
}

// cancelAllParallelism bounds the Cancel RPCs one session's end has in
// flight at once. One at a time, a disconnect with 10,000 calls took one
// etcd commit's latency per call (minutes); many at once, etcd commits
// them together (BenchmarkStdioDisconnect).
const cancelAllParallelism = 64

// cancelAll cancels every call of this session held here, and returns once
// every cancel has been answered. With more than one call, the
// coordinator cancels the whole scope at once (many calls per etcd
// transaction); the calls it did not cancel (begun after it looked, not
// begun yet, or settled otherwise) are cancelled one by one.
func (s *session) cancelAll(who pb.Initiator, reason string) {
	cs := s.inboundCalls()
	s.g.callersGone(cs) // their handlers stop now; the decisions follow
	if len(cs) > 1 {
		cs = s.cancelScope(cs, who, reason)
	}
	cancelEach(cs, who, reason)
}

// inboundCalls are the calls of this session held here.
func (s *session) inboundCalls() []*call {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]*call, 0, len(s.inbound))
	for _, c := range s.inbound {
		cs = append(cs, c)
	}
	return cs
}

// cancelEach cancels each call, many at once, and returns once every
// cancel has been answered.
func cancelEach(cs []*call, who pb.Initiator, reason string) {
	sem := make(chan struct{}, cancelAllParallelism)
	var wg sync.WaitGroup
	for _, c := range cs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c.requestCancel(who, reason)
		})
	}
	wg.Wait()
}

// cancelScope asks the coordinator to cancel every running call of the
// scope, closes the gates of those it cancelled, and returns the others.
func (s *session) cancelScope(cs []*call, who pb.Initiator, reason string) []*call {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.g.base), cancelTimeout)
	defer cancel()
	resp, err := s.g.coord.CancelScope(ctx, &pb.CancelScopeRequest{
		Scope: s.scope, Initiator: who, Reason: reason, Principal: s.principal,
	})
	if err != nil {
		s.g.log.Warn("cancelling a scope failed; cancelling its calls one by one", "scope", s.scope, "err", err)
		return cs
	}
	return closeWon(cs, resp.GetCallIds(), who, reason)
}

// closeWon closes the gates of the calls whose ids the coordinator
// cancelled for who, and returns the others.
func closeWon(cs []*call, ids []string, who pb.Initiator, reason string) []*call {
	won := make(map[string]bool, len(ids))
	for _, id := range ids {
		won[id] = true
	}
	var rest []*call
	for _, c := range cs {
		c.mu.Lock()
		begun := c.begun
		c.mu.Unlock()
		if begun != nil && won[begun.GetCallId()] {
			c.cancelledBy(who, reason)
		} else {
			rest = append(rest, c)
		}
	}
	return rest
}

// ping sends the client a ping; the answer, if any, is matched by id.
func (s *session) ping(ctx context.Context) error {
	s.mu.Lock()
	s.nextOut++
	id := jsonrpc.String("mcpcancel-ping-" + itoa(s.nextOut))
	ch := make(chan *jsonrpc.Message, 1)
	s.outbound[id.Key()] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.outbound, id.Key())
		s.mu.Unlock()
	}()
	if !s.notify(jsonrpc.Request(id, "ping", nil)) {
		return ErrClosed
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func requestID(id jsonrpc.ID) *pb.RequestId {
	if id.IsString() {
		return client.TextID(id.Str())
	}
	return client.NumberID(id.Num())
}

// pingLoop pings the client every interval until ctx is done. A client
// that does not answer within the interval is only logged: pings are
// liveness hints, not a reason to cancel anything.
func (s *session) pingLoop(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		rev2025 := s.version != "" && !s.rev2026 // 2026-07-28 clients drop server requests
		s.mu.Unlock()
		if !rev2025 {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, interval)
		if err := s.ping(pctx); err != nil && ctx.Err() == nil {
			s.g.log.Debug("client did not answer a ping", "scope", s.scope, "err", err)
		}
		cancel()
	}
}
