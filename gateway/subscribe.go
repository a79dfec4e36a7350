package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// followNotifications delivers, until ctx is done, what workers addressed
// to client sessions outside any call (logs, resource updates), from
// whichever coordinator replica heard them, to the sessions this replica
// holds a notification stream for.
func (g *Gateway) followNotifications(ctx context.Context) {
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for ctx.Err() == nil {
		start := time.Now()
		err := g.watchNotifications(ctx)
		if ctx.Err() != nil {
			return
		}
		g.log.Warn("session notification watch ended; retrying", "err", err)
		if time.Since(start) > 5*time.Second {
			retry.Reset()
		}
		retry.Wait(ctx)
	}
}

func (g *Gateway) watchNotifications(ctx context.Context) error {
	stream, err := g.coord.WatchSessionNotifications(ctx, &pb.WatchSessionNotificationsRequest{Gateway: g.opts.Name})
	if err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		g.deliverNotification(m)
	}
}

// deliverNotification sends m to each named session held here that can
// hear it: a log only at or above the session's logging/setLevel.
func (g *Gateway) deliverNotification(m *pb.WatchSessionNotificationsResponse) {
	params := json.RawMessage(m.GetParamsJson())
	var level string
	if m.GetMethod() == "notifications/message" {
		var p struct {
			Level string `json:"level"`
		}
		if json.Unmarshal(params, &p) != nil {
			return
		}
		level = p.Level
	}
	want := make(map[string]bool, len(m.GetSessions()))
	for _, s := range m.GetSessions() {
		want[s] = true
	}
	// A 2026-07-28 client hears no session logs; its listens that named
	// a resource hear its updates (listen.go).
	updated := m.GetMethod() == notifyResourceUpdated
	g.mu.Lock()
	var ss []*session
	for s := range g.sessions {
		if want[s.scope] {
			ss = append(ss, s)
		}
	}
	g.mu.Unlock()
	if id := m.GetRequestId(); id != "" {
		for _, s := range ss {
			s.askSession(m.GetMethod(), id, params) // asksession.go
		}
		return
	}
	msg := jsonrpc.Notification(m.GetMethod(), params)
	for _, s := range ss {
		if s.speaks2026() && !updated {
			continue
		}
		if level == "" || s.logs(level) {
			s.notify(msg)
		}
	}
}

// recordSubscription tells the coordinator that the session subscribed to
// (or unsubscribed from) a resource, once its worker accepted the
// request, so resource updates reach it on whichever replica holds its
// stream.
func (s *session) recordSubscription(ctx context.Context, uri string, unsubscribe bool) error {
	ctx, cancel := context.WithTimeout(ctx, cancelTimeout)
	defer cancel()
	_, err := s.g.coord.SubscribeResource(ctx, &pb.SubscribeResourceRequest{
		Session: s.scope, Principal: s.principal, Uri: uri, Unsubscribe: unsubscribe,
	})
	return err
}

// announceEnd tells the coordinator a stdio client left, so that workers
// close what they kept for its session (an upstream session of its own)
// and its subscriptions are forgotten. A 2025 HTTP session's DELETE does
// the same through CloseSession.
func (s *session) announceEnd(reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.g.base), cancelTimeout)
	defer cancel()
	_, err := s.g.coord.CancelScope(ctx, &pb.CancelScopeRequest{
		Scope: s.scope, Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: reason, Principal: s.principal,
	})
	if err != nil && !client.Is(err, client.ErrInvalidArgument) {
		s.g.log.Warn("announcing a stdio session's end", "scope", s.scope, "err", err)
	}
}

// noteSubscription records, before the client hears that its worker
// accepted a resources/subscribe or unsubscribe, what it changed: so that
// an update sent right after the answer already finds the subscription.
// Were the record lost, the client is subscribed upstream but hears
// nothing; that is logged.
func (c *call) noteSubscription(r *pb.ExecuteResult) {
	unsub := c.method == "resources/unsubscribe"
	if c.method != "resources/subscribe" && !unsub || len(r.GetErrorJson()) > 0 || c.rev2026 {
		return
	}
	if err := c.s.recordSubscription(context.WithoutCancel(c.s.g.base), c.target, unsub); err != nil {
		c.s.g.log.Warn("recording a resource subscription", "scope", c.s.scope, "uri", c.target, "unsubscribe", unsub, "err", err)
	}
}
