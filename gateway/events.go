package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
)

// The events extension (SEP-3415) of fronted servers, for 2026-07-28
// clients, the only revision it is defined for:
//
//   - events/list is answered from the catalogue (the event types live
//     workers offer), paginated like prompts/list; each entry's delivery
//     list drops "webhook", and an entry left with no mode is not listed;
//   - events/poll and events/stream are calls (routed.go), placed on a
//     worker that offers the event's name. A stream's notifications reach
//     the client on the call's own stream, in order, with its id as
//     _meta's subscription id; the client's cancel (notifications/cancelled,
//     or the close of the request's HTTP stream) cancels it as a call;
//   - events/subscribe and events/unsubscribe (webhook delivery) are
//     refused: this gateway delivers no webhooks, and a fronted server's
//     webhook would bypass its settlement and audit;
//   - a 2025-era session gets -32601 for every events/* request.

// eventsPrefix starts every method of the extension, and the
// notifications it adds.
const (
	eventsPrefix        = "events/"
	eventsNotifyPrefix  = "notifications/events/"
	methodEventsList    = "events/list"
	methodEventsStream  = "events/stream"
	deliveryWebhook     = "webhook"
	webhookNotAvailable = "%s is not available: this gateway does not deliver webhooks (it is not configured to); use events/poll or events/stream"
)

// eventsRefused is the error for an events/* request the session cannot
// make; nil for one it can (events/list, events/poll, events/stream in a
// 2026-07-28 session).
func (s *session) eventsRefused(method string) *jsonrpc.Error {
	if !strings.HasPrefix(method, eventsPrefix) {
		return nil
	}
	if !s.speaks2026() {
		return jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "Method not found: %s is part of the %s extension, which is defined for %s and later", method, mcpspec.ExtensionEvents, mcpspec.Version20260728)
	}
	switch method {
	case methodEventsList, "events/poll", methodEventsStream:
		return nil
	case "events/subscribe", "events/unsubscribe":
		return jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, webhookNotAvailable, method)
	}
	return jsonrpc.Errorf(jsonrpc.CodeMethodNotFound, "method not found: %s", method)
}

// eventForClients is a worker's events/list entry as the gateway lists
// it: "webhook" dropped from its delivery modes; nil if it is not an
// object or offers no other mode.
func eventForClients(raw json.RawMessage) json.RawMessage {
	var e map[string]json.RawMessage
	if json.Unmarshal(raw, &e) != nil || e == nil {
		return nil
	}
	var modes []string
	if json.Unmarshal(e["delivery"], &modes) != nil {
		return nil
	}
	kept := slices.DeleteFunc(slices.Clone(modes), func(m string) bool { return m == deliveryWebhook })
	if len(kept) == 0 {
		return nil
	}
	if len(kept) == len(modes) {
		return raw
	}
	e["delivery"] = rawJSON(kept)
	return rawJSON(e)
}

// withEventsExtension declares the extension in 2026-07-28 capabilities
// while some live worker offers an event type. listChanged is not
// declared: the gateway sends no notifications/events/list_changed.
func (g *Gateway) withEventsExtension(ctx context.Context, caps map[string]any) map[string]any {
	c, err := g.currentOffers(ctx)
	if err != nil || len(c.events) == 0 {
		return caps
	}
	ext, _ := caps["extensions"].(map[string]any)
	if ext == nil {
		ext = map[string]any{}
		caps["extensions"] = ext
	}
	ext[mcpspec.ExtensionEvents] = map[string]any{}
	return caps
}

// eventNotFound is the extension's NotFound for an event name no live
// worker offers.
func eventNotFound(name string) *jsonrpc.Error {
	return &jsonrpc.Error{Code: mcpspec.CodeEventNotFound, Message: "NotFound: no event type " + strconv.Quote(name),
		Data: json.RawMessage(`{"kind":"event"}`)}
}

// notify relays a notification of a running events/stream to its client,
// in order, tagged with the call's id as its subscription id. Only the
// extension's notifications/events/* pass: the stream carries nothing
// else. Like progress, none goes out once the call's gate has closed.
func (c *call) notify(n *pb.CallNotification) {
	params := bytes.TrimSpace(n.GetParamsJson())
	if c.method != methodEventsStream || !strings.HasPrefix(n.GetMethod(), eventsNotifyPrefix) ||
		len(params) == 0 || params[0] != '{' || !json.Valid(params) {
		return
	}
	id, _ := c.id.MarshalJSON()
	msg := tagSubscription(jsonrpc.Notification(n.GetMethod(), json.RawMessage(params)), id)
	c.gate.relay(func() bool { return c.reply.send(msg) })
}

// streamResult is an events/stream's final result with the call's id as
// its subscription id (the server's names its own request); other
// methods' results pass unchanged.
func (c *call) streamResult(raw json.RawMessage) json.RawMessage {
	if c.method != methodEventsStream {
		return raw
	}
	var r map[string]json.RawMessage
	if json.Unmarshal(raw, &r) != nil || r == nil {
		return raw
	}
	var meta map[string]json.RawMessage
	json.Unmarshal(r["_meta"], &meta)
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	id, _ := c.id.MarshalJSON()
	meta[mcpspec.MetaSubscriptionID] = id
	r["_meta"] = rawJSON(meta)
	return rawJSON(r)
}
