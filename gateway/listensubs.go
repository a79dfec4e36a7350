package gateway

import (
	"context"
	"sync"

	"github.com/mcpcancel/mcpcancel/internal/authz"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// Resource subscriptions of 2026-07-28 listens. A listen that names
// resource URIs subscribes to each as a 2025 session's resources/subscribe
// does: the subscription is recorded at the coordinator under the
// listen's scope, so that a worker's update, whichever coordinator
// replica hears it, reaches the gateway replica holding the listen (the
// session notification bus, coordinator/subscribe.go); and
// resources/subscribe is routed to the worker serving the URI, whose
// upstream server is then subscribed. When the listen ends both are
// undone. On HTTP a listen is a scope of its own (stream:…); on stdio the
// connection's listens share its scope and count each URI's holders
// (stdio20260728.go). A URI no worker serves, or whose worker refuses the
// subscription, is left out of the acknowledgement.

// listenSubscribeParallelism bounds one listen's subscribe calls in
// flight at once.
const listenSubscribeParallelism = 8

// subscribeURIs subscribes the session to each of uris that the caller
// may subscribe to, at once, and returns those that hold.
func (s *session) subscribeURIs(ctx context.Context, uris []string, may func(string) bool) map[string]bool {
	var mu sync.Mutex
	held := map[string]bool{}
	sem := make(chan struct{}, listenSubscribeParallelism)
	var wg sync.WaitGroup
	for _, uri := range uris {
		if !may(uri) {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if s.subscribeURI(ctx, uri) {
				mu.Lock()
				held[uri] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return held
}

// unsubscribeURIs undoes subscribeURIs, at once.
func (s *session) unsubscribeURIs(uris map[string]bool) {
	sem := make(chan struct{}, listenSubscribeParallelism)
	var wg sync.WaitGroup
	for uri := range uris {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s.unsubscribeURI(uri)
		})
	}
	wg.Wait()
}

// subscribeURI subscribes the session to uri: the coordinator's record
// first, so that an update the upstream server sends as soon as it is
// subscribed already finds it, then resources/subscribe at the worker.
// It reports whether both hold; when the worker refuses, the record is
// removed.
func (s *session) subscribeURI(ctx context.Context, uri string) bool {
	if err := s.recordSubscription(ctx, uri, false); err != nil {
		s.g.log.Warn("recording a listen's resource subscription", "scope", s.scope, "uri", uri, "err", err)
		return false
	}
	if e := s.internalCall(ctx, "resources/subscribe", uri); e != nil {
		s.g.log.Debug("a listen's resource subscription was refused", "scope", s.scope, "uri", uri, "code", e.Code, "message", e.Message)
		s.forgetSubscription(uri)
		return false
	}
	return true
}

// unsubscribeURI ends the session's subscription to uri, at the
// coordinator then at the worker. Best effort, past the listen's end:
// a record left behind expires with the retention lease; an upstream
// subscription left behind only sends updates nobody is routed.
func (s *session) unsubscribeURI(uri string) {
	s.forgetSubscription(uri)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.g.base), cancelTimeout)
	defer cancel()
	if e := s.internalCall(ctx, "resources/unsubscribe", uri); e != nil {
		s.g.log.Debug("unsubscribing a listen's resource upstream", "scope", s.scope, "uri", uri, "code", e.Code, "message", e.Message)
	}
}

func (s *session) forgetSubscription(uri string) {
	if err := s.recordSubscription(context.WithoutCancel(s.g.base), uri, true); err != nil {
		s.g.log.Warn("removing a listen's resource subscription", "scope", s.scope, "uri", uri, "err", err)
	}
}

// internalCall routes a resources/subscribe or unsubscribe of the
// gateway's own, for a listen, to the worker serving uri: a call like a
// client's (registered, begun, settled once, audited), under an id no
// client request uses. It returns the worker's error, if any.
func (s *session) internalCall(ctx context.Context, method, uri string) *jsonrpc.Error {
	m := &jsonrpc.Message{
		Kind: jsonrpc.KindRequest, ID: jsonrpc.String("mcpcancel-listen-" + randid.New(8)),
		Method: method, Params: rawJSON(map[string]any{"uri": uri}),
	}
	out := &jsonSink{}
	s.handleCall(ctx, m, paramsOf(m), out)
	out.mu.Lock()
	msg := out.msg
	out.mu.Unlock()
	if msg == nil {
		return jsonrpc.Errorf(jsonrpc.CodeInternalError, "%s %s was not answered", method, uri)
	}
	got, derr := jsonrpc.Decode(msg)
	if derr != nil {
		return derr.Error
	}
	return got.Error
}

// mayListen says whether the caller's token may subscribe to uri, as a
// resources/subscribe of it would need.
func (h *httpTransport) mayListen(ctx context.Context, principal string) func(string) bool {
	granted := identityFrom(ctx).Scopes
	return func(uri string) bool {
		d := h.guard.opts.Policy.Decide(authz.Request{Principal: principal, Granted: granted, Method: "resources/subscribe", Resource: uri})
		return d.Denied == "" && len(d.Missing) == 0
	}
}

// anyURI lets a stdio client, which has no token, subscribe to any URI.
func anyURI(string) bool { return true }
