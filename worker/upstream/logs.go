package upstream

import (
	"context"

	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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

// relayKey carries a call's relay in the context of its upstream request,
// so that the HTTP tap can hand the call the log messages the server
// sends on that request's response stream: logs related to the call.
type relayKey struct{}

func withRelay(ctx context.Context, r *relay) context.Context {
	return context.WithValue(ctx, relayKey{}, r)
}

func relayFrom(ctx context.Context) *relay {
	r, _ := ctx.Value(relayKey{}).(*relay)
	return r
}

// log relays a log message related to the call while the call runs; the
// gateway filters it by the level the client asked for.
func (r *relay) log(p *mcp.LoggingMessageParams) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.ctx.Err() != nil {
		return
	}
	r.call.Log(string(p.Level), p.Logger, p.Data)
}

// setLogLevel asks the server, in the request's _meta, for the call's logs
// at the level its client asked for.
func setLogLevel(p *mcp.CallToolParams, level string) {
	if level == "" {
		return
	}
	if p.Meta == nil {
		p.Meta = mcp.Meta{}
	}
	p.Meta[mcpspec.MetaLogLevel] = level // a 2025-era server ignores it
}
