package upstream

import (
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// resourceUpdated relays notifications/resources/updated: from a client
// session's own upstream session to that session (the server knows it
// subscribed), from the shared connection to every session the
// coordinator holds subscribed to the URI.
func (a *Adapter) resourceUpdated(key string, p *mcp.ResourceUpdatedNotificationParams) {
	if p == nil || p.URI == "" {
		return
	}
	a.w.NotifySession(key, "notifications/resources/updated", p)
}

// sharedSubs counts the client sessions (and 2026-07-28 listens)
// subscribed to each URI over the shared connection, so that one
// client's unsubscribe does not end the subscription upstream while
// another client still holds it.
type sharedSubs struct {
	mu sync.Mutex
	m  map[string]map[string]bool // uri -> client sessions
}

// sharedSubscription notes a resources/subscribe or unsubscribe that goes
// over the shared connection, and says whether to skip forwarding it: an
// unsubscribe while other client sessions still hold the resource.
// Subscribes are always forwarded (the server takes a repeat as one).
func (a *Adapter) sharedSubscription(c *worker.Call) (skip bool) {
	if a.opts.Sessions == PerClient && c.Session() != "" {
		return false // its own upstream session: the server keeps count
	}
	subs := &a.subs
	subs.mu.Lock()
	defer subs.mu.Unlock()
	uri, who := c.URI(), c.Subscriber() // a session, or a 2026-07-28 listen
	switch c.Method {
	case worker.MethodResourcesSubscribe:
		if subs.m == nil {
			subs.m = map[string]map[string]bool{}
		}
		if subs.m[uri] == nil {
			subs.m[uri] = map[string]bool{}
		}
		subs.m[uri][who] = true
	case worker.MethodResourcesUnsubscribe:
		delete(subs.m[uri], who)
		if len(subs.m[uri]) > 0 {
			return true
		}
		delete(subs.m, uri)
	}
	return false
}

// forgetSession drops an ended client session from the shared
// subscriptions. The upstream subscription stays (nobody is left to be
// told, and the coordinator no longer routes its updates to the session).
func (s *sharedSubs) forgetSession(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uri, keys := range s.m {
		delete(keys, key)
		if len(keys) == 0 {
			delete(s.m, uri)
		}
	}
}
