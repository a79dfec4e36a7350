package gateway

import (
	"encoding/json"
	"maps"
	"slices"
	"sync"

	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// subscriptions/listen over stdio. On HTTP a listen is its own response
// stream; on stdio it shares the connection, lives until the client's
// notifications/cancelled names it, and tags each notification it
// carries with its id, so the client can tell its subscriptions apart.

// listenFanout is a 2026-07-28 stdio session's notifier: it passes
// everything but change notifications through to the connection, and
// sends each change notification once per listen that asked for it,
// tagged with that listen's id. With no listen open, changes are dropped:
// a 2026-07-28 client hears of them only on a subscription.
type listenFanout struct {
	base sink

	mu   sync.Mutex
	subs map[string]*stdioListen // request id key → the listen
}

// stdioListen is one listen open on a stdio connection.
type stdioListen struct {
	id    json.RawMessage // as sent
	kinds listenKinds
}

func (f *listenFanout) send(msg []byte) bool {
	kind := changeKind(msg)
	if kind == "" {
		return f.base.send(msg)
	}
	f.mu.Lock()
	ids := make([]json.RawMessage, 0, len(f.subs))
	for _, key := range slices.Sorted(maps.Keys(f.subs)) { // in a fixed order
		if l := f.subs[key]; l.kinds[kind] {
			ids = append(ids, l.id)
		}
	}
	f.mu.Unlock()
	ok := true
	for _, id := range ids {
		ok = f.base.send(tagSubscription(msg, id)) && ok
	}
	return ok
}

func (f *listenFanout) sendLatest(key string, msg []byte) bool { return f.base.sendLatest(key, msg) }

func (f *listenFanout) flush() { f.base.flush() }

// fanout returns the session's listen fanout, installing it in front of
// the connection the first time; nil when the session has no connection
// to send on (2026-07-28 HTTP, whose listens are streams of their own).
func (s *session) fanout() *listenFanout {
	s.mu.Lock()
	k := s.notifier
	s.mu.Unlock()
	switch k := k.(type) {
	case nil:
		return nil
	case *listenFanout:
		return k
	default:
		f := &listenFanout{base: k, subs: map[string]*stdioListen{}}
		s.setNotifier(f)
		return f
	}
}

// listenStdio opens a subscription on a stdio connection: it answers the
// acknowledgement at once and leaves the request open.
func (s *session) listenStdio(m *jsonrpc.Message, reply sink) {
	f := s.fanout()
	if f == nil || !s.isModern() {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method not found: %s", m.Method)))
		return
	}
	kinds, granted, err := parseListen(m.Params)
	if err != nil {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid subscriptions/listen params")))
		return
	}
	id := rawJSON(m.ID)
	if len(kinds) > 0 {
		f.mu.Lock()
		f.subs[m.ID.Key()] = &stdioListen{id: id, kinds: kinds}
		f.mu.Unlock()
	}
	(&listenSink{out: reply, id: id}).send(jsonrpc.Notification("notifications/subscriptions/acknowledged", map[string]any{"notifications": granted}))
}

// endListen closes the subscription a notifications/cancelled names, if
// it names one; it reports whether it did. Nothing answers the listen:
// its client cancelled it.
func (s *session) endListen(params json.RawMessage) bool {
	var p cancelParams
	if json.Unmarshal(params, &p) != nil || p.RequestID == nil {
		return false
	}
	id, err := jsonrpc.ParseID(p.RequestID)
	if err != nil {
		return false
	}
	s.mu.Lock()
	f, _ := s.notifier.(*listenFanout)
	s.mu.Unlock()
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.subs[id.Key()]
	delete(f.subs, id.Key())
	return ok
}
