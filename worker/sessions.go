package worker

import (
	"encoding/json"
	"sync"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Session is the client session the call belongs to: the same string for
// every call of one 2025-era HTTP session or stdio connection, and empty
// for a 2026-07-28 request, which belongs to none. It is an opaque key,
// never a credential.
func (c *Call) Session() string { return c.session }

// LogLevel is the least severe MCP log level the client asked for (its
// session's logging/setLevel, or the request's _meta log level); empty
// when it set none.
func (c *Call) LogLevel() string { return c.logLevel }

// maxNotices bounds session notifications queued for the coordinator;
// past it new ones are dropped: they are logs and resource updates, lossy
// by nature, and must not grow without bound while detached.
const maxNotices = 1024

// sessionHooks are the callbacks for session lifecycle events.
type sessionHooks struct {
	mu    sync.Mutex
	ended []func(session string)
}

// OnSessionEnd registers f to run when a client session ends (the client
// sent DELETE or closed its stdio connection, or the session was closed
// for it), with the key Call.Session gave its calls. f runs on the
// worker's control goroutine and must not block; it may run for sessions
// that never reached this worker.
func (w *Worker) OnSessionEnd(f func(session string)) {
	w.hooks.mu.Lock()
	defer w.hooks.mu.Unlock()
	w.hooks.ended = append(w.hooks.ended, f)
}

func (w *Worker) sessionEnded(session string) {
	w.hooks.mu.Lock()
	fs := append([]func(string){}, w.hooks.ended...)
	w.hooks.mu.Unlock()
	for _, f := range fs {
		f(session)
	}
}

// NotifySession sends an MCP notification to a client session, outside
// any call: method is notifications/message (a log),
// notifications/resources/updated or notifications/elicitation/complete
// (see CompleteElicitation); params is its JSON-encodable params.
// With session empty, a resources/updated goes to every session
// subscribed to its URI. Delivery is best effort: nothing is sent while
// the worker is detached, and a flood is dropped rather than queued.
func (w *Worker) NotifySession(session, method string, params any) {
	b, err := json.Marshal(params)
	if err != nil {
		return
	}
	w.ctrl.notify(&pb.SessionNotification{Session: session, Method: method, ParamsJson: b})
}

func (c *control) notify(n *pb.SessionNotification) {
	c.mu.Lock()
	if c.stream != nil && len(c.outbox) < maxNotices {
		c.outbox = append(c.outbox, &pb.AttachRequest{Msg: &pb.AttachRequest_Notification{Notification: n}})
	}
	c.mu.Unlock()
	c.signal()
}
