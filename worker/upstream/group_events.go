package upstream

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpcancel/mcpcancel/internal/mcpspec"
	"github.com/mcpcancel/mcpcancel/worker"
)

// Event types in a Group: named like tools and prompts, with the server's
// name and PrefixSeparator before the server's own name when the group
// has more than one server. events/poll and events/stream reach the
// server under its own name.

// mergeEventsLocked adds m's event types under their group names.
func (g *Group) mergeEventsLocked(m *member, o *worker.Offers, r *offerRoutes) {
	for _, e := range m.offered.Events {
		name := g.nameLocked(m, e.Name)
		desc, err := setString(e.JSON, name, []string{"name"})
		if err != nil {
			continue // as the adapter does: not an object with a name
		}
		r.events[name] = toolRoute{m, e.Name}
		o.Events = append(o.Events, &worker.EventType{Name: name, JSON: desc})
	}
}

// routeEvent finds the server of an event type by its group name.
func routeEvent(r offerRoutes, up *worker.Call) (*member, *worker.Call, error) {
	e, ok := r.events[up.Tool]
	if !ok {
		data, _ := json.Marshal(map[string]string{"kind": "event"})
		return nil, nil, &jsonrpc.Error{Code: mcpspec.CodeEventNotFound, Message: fmt.Sprintf("NotFound: no event type %q", up.Tool), Data: data}
	}
	up.Tool = e.name
	return e.m, up, renameIn(&up.Params, e.name, "name")
}
