package gateway

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sync"

	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// subscriptions/listen over stdio. On HTTP a listen is its own response
// stream; on stdio it shares the connection, lives until the client's
// notifications/cancelled names it (or the connection ends), and tags
// each notification it carries with its id, so the client can tell its
// subscriptions apart. A listen that names resources or tasks is
// acknowledged once they are subscribed (listensubs.go, listentasks.go),
// off the connection's read loop; one that names neither, at once.

// listenFanout is a 2026-07-28 stdio session's notifier: it passes
// everything but listen notifications through to the connection, and
// sends each listen notification once per listen that asked for it,
// tagged with that listen's id. With no listen open, they are dropped: a
// 2026-07-28 client hears of changes only on a subscription.
type listenFanout struct {
	base sink
	// ctx ends when the connection's listens are closed; it bounds their
	// opening and their task followers.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // each listen's opening and teardown

	mu   sync.Mutex
	subs map[string]*stdioListen // request id key → the listen

	// The connection's listens share its scope, so each URI is
	// subscribed once for all that hold it. Changes go one at a time
	// (they are calls to workers; subMu is never taken on a send path).
	subMu sync.Mutex
	held  map[string]int // URI → listens holding it
}

// stdioListen is one listen open on a stdio connection. Its fields after
// id are guarded by the fanout's mu.
type stdioListen struct {
	id    jsonrpc.ID
	raw   json.RawMessage // id as sent, for the tag
	wants *listenWants
	acked bool   // its acknowledgement went out: it may carry notifications
	ended bool   // cancelled, or the connection ended
	stop  func() // stops its task followers; nil until acked
}

func (f *listenFanout) send(msg []byte) bool {
	method, name := listenMessage(msg)
	if method == "" {
		return f.base.send(msg)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ok := true
	for _, key := range slices.Sorted(maps.Keys(f.subs)) { // in a fixed order
		if l := f.subs[key]; l.acked && l.wants.wants(method, name) {
			ok = f.base.send(tagSubscription(msg, l.raw)) && ok // a sink only queues
		}
	}
	return ok
}

func (f *listenFanout) sendLatest(key string, msg []byte) bool { return f.base.sendLatest(key, msg) }

func (f *listenFanout) streams() bool { return true }

func (f *listenFanout) flush() { f.base.flush() }

// listenSinkOf is where one listen's own notifications (its tasks') go:
// tagged, and only while the listen is open.
type stdioListenSink struct {
	f *listenFanout
	l *stdioListen
}

func (o *stdioListenSink) send(msg []byte) bool {
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	if o.l.ended {
		return true
	}
	return o.f.base.send(tagSubscription(msg, o.l.raw))
}

func (o *stdioListenSink) sendLatest(string, []byte) bool { return false }

func (o *stdioListenSink) streams() bool { return true }

func (o *stdioListenSink) flush() { o.f.base.flush() }

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
		f := &listenFanout{base: k, subs: map[string]*stdioListen{}, held: map[string]int{}}
		f.ctx, f.cancel = context.WithCancel(s.g.base)
		s.setNotifier(f)
		return f
	}
}

// listenStdio opens a subscription on a stdio connection and leaves the
// request open. The listen is registered before this returns, so a
// notifications/cancelled read after it finds it.
func (s *session) listenStdio(m *jsonrpc.Message, reply sink) {
	f := s.fanout()
	if f == nil || !s.speaks2026() {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method not found: %s", m.Method)))
		return
	}
	lr, err := parseListen(m.Params)
	if err != nil {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid subscriptions/listen params: %v", err)))
		return
	}
	if e := listenTasksAllowed(lr, paramsOf(m)); e != nil {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, e))
		return
	}
	l := &stdioListen{id: m.ID, raw: rawJSON(m.ID), wants: newListenWants(lr.kinds)}
	f.mu.Lock()
	_, dup := f.subs[m.ID.Key()]
	if !dup {
		f.subs[m.ID.Key()] = l
	}
	f.mu.Unlock()
	if dup {
		reply.send(jsonrpc.ErrorResponse(m.ID, true, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "a subscription with id %s is already open", l.raw)))
		return
	}
	if len(lr.uris) == 0 && len(lr.tasks) == 0 {
		f.opened(s, l, lr)
		return
	}
	f.wg.Go(func() {
		l.wants.tasks = s.knownTasks(f.ctx, lr.tasks)
		l.wants.uris = f.hold(s, lr.uris)
		f.opened(s, l, lr)
	})
}

// opened acknowledges a listen whose subscriptions hold, and starts its
// task followers; a listen cancelled meanwhile gives them up instead.
func (f *listenFanout) opened(s *session, l *stdioListen, lr *listenRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.ended {
		f.wg.Go(func() { f.release(s, l.wants.uris) })
		return
	}
	ack := jsonrpc.Notification("notifications/subscriptions/acknowledged", acknowledgement(lr, l.wants))
	f.base.send(tagSubscription(ack, l.raw)) // a sink only queues
	l.acked = true
	l.stop = s.followTasks(f.ctx, l.wants.tasks, &stdioListenSink{f: f, l: l})
}

// hold subscribes the connection to each URI that none of its listens
// holds yet, and counts the listen as a holder of those that hold.
func (f *listenFanout) hold(s *session, uris []string) map[string]bool {
	f.subMu.Lock()
	defer f.subMu.Unlock()
	held := map[string]bool{}
	var fresh []string
	for _, uri := range uris {
		if f.held[uri] > 0 {
			held[uri] = true
		} else {
			fresh = append(fresh, uri)
		}
	}
	for uri := range s.subscribeURIs(f.ctx, fresh, anyURI) {
		held[uri] = true
	}
	for uri := range held {
		f.held[uri]++
	}
	return held
}

// release gives up a listen's URIs, unsubscribing those no other listen
// of the connection holds.
func (f *listenFanout) release(s *session, uris map[string]bool) {
	f.subMu.Lock()
	defer f.subMu.Unlock()
	gone := map[string]bool{}
	for uri := range uris {
		if f.held[uri]--; f.held[uri] <= 0 {
			delete(f.held, uri)
			gone[uri] = true
		}
	}
	s.unsubscribeURIs(gone)
}

// endLocked ends a listen: no notification goes out on it from now on,
// and its subscriptions are given up in the background. Callers hold
// f.mu and have removed it from f.subs.
func (f *listenFanout) endLocked(s *session, l *stdioListen) {
	l.ended = true
	if !l.acked {
		return // its opening gives its subscriptions up (opened)
	}
	stop, uris := l.stop, l.wants.uris
	f.wg.Go(func() {
		stop()
		f.release(s, uris)
	})
}

// endListen closes the subscription a notifications/cancelled names by
// id, if it names one; it reports whether it did. Nothing answers the
// listen: its client cancelled it.
func (s *session) endListen(id jsonrpc.ID) bool {
	f := s.currentFanout()
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.subs[id.Key()]
	if ok {
		delete(f.subs, id.Key())
		f.endLocked(s, l)
	}
	return ok
}

func (s *session) currentFanout() *listenFanout {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, _ := s.notifier.(*listenFanout)
	return f
}

// closeListens ends every listen of a stdio connection that is ending,
// and returns once their subscriptions are given up. When the gateway
// ends them (graceful) rather than the client, each acknowledged listen
// is answered first, as the spec asks of a server that tears a
// subscription down.
func (s *session) closeListens(graceful bool) {
	f := s.currentFanout()
	if f == nil {
		return
	}
	f.mu.Lock()
	for key, l := range f.subs {
		if graceful && l.acked {
			f.base.send(jsonrpc.Response(l.id, listenResult(l.id)))
		}
		delete(f.subs, key)
		f.endLocked(s, l)
	}
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}
