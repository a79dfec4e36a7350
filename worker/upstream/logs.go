package upstream

import "github.com/modelcontextprotocol/go-sdk/mcp"

// sessionLog relays a log message the server sent outside any call
// (notifications/message) to the client session whose upstream session
// it came on. The shared connection belongs to no client session: what
// it logs outside a call is the adapter's to log, not any client's.
func (a *Adapter) sessionLog(key string, p *mcp.LoggingMessageParams) {
	if p == nil {
		return
	}
	if key == "" {
		a.log.Debug("upstream log on the shared connection", "level", p.Level, "logger", p.Logger)
		return
	}
	a.w.NotifySession(key, "notifications/message", p)
}
