package worker

import (
	"encoding/json"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// The events extension (SEP-3415, io.modelcontextprotocol/events) of a
// fronted server. Its event types are offers like prompts, keyed by name;
// events/poll and events/stream are calls on a worker that offers the
// name: settled once, cancellable, audited. An events/stream call runs
// until the server ends it or it is cancelled, and sends its client the
// server's notifications/events/* messages as they come (Call.Notify).
const (
	MethodEventsPoll   = "events/poll"
	MethodEventsStream = "events/stream"
)

// EventType is an event type a worker offers: its name, and the server's
// events/list entry for it, kept as JSON so that every field (delivery,
// schemas, _meta, ones this package does not know) passes whole.
type EventType struct {
	Name string
	JSON json.RawMessage
}

// MarshalJSON is the events/list entry as the server gave it.
func (e *EventType) MarshalJSON() ([]byte, error) { return e.JSON, nil }

// Notify sends the call's client a notification about the call, on the
// call's own stream and in the order of Notify's calls, while the call
// runs: an events/stream relays the server's notifications/events/*
// messages with it. params is a JSON object; the gateway sets its
// _meta["io.modelcontextprotocol/subscriptionId"] to the client's id of
// the call. It reports whether the notification was sent: false once the
// call was settled or cancelled.
func (c *Call) Notify(method string, params json.RawMessage) bool {
	if c.exec == nil {
		return false
	}
	return c.exec.sendRunning(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Notification{
		Notification: &pb.CallNotification{Method: method, ParamsJson: params},
	}})
}
