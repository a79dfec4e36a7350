package upstream

import "github.com/modelcontextprotocol/go-sdk/mcp"

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
