package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// The catalogue is what live workers offer besides tools: resources,
// resource templates and prompts, each described in MCP's own JSON by the
// worker (or the server it fronts), and the features that decide what
// the gateway advertises. The coordinator keeps it in etcd with each
// worker's registration and streams the union to every gateway
// (WatchTools); the gateway answers resources/list,
// resources/templates/list and prompts/list from it, paginated, without
// asking any worker. A list is then one answer over every fleet, costs no
// call, and stays consistent with routing: what is listed is exactly what
// a read or get can reach. When two workers offer the same URI, template
// or prompt name they are taken as replicas: the listing shows the first
// worker's (by name) description, and calls go to either.

// listPageSize is how many entries one page of a list holds.
const listPageSize = 100

// catalogue is the gateway's copy of what workers offer.
type catalogue struct {
	resources []json.RawMessage
	templates []json.RawMessage
	prompts   []json.RawMessage
	events    []json.RawMessage // event types, as events/list shows them (events.go)
	features  *pb.Features

	msg      *pb.WatchToolsResponse // as the watch delivered it; nil if asked for
	replaced chan struct{}          // closed when the watch delivers the next
}

func newCatalogue(offers []*pb.Offer, f *pb.Features) *catalogue {
	c := &catalogue{features: f, replaced: make(chan struct{})}
	if c.features == nil {
		c.features = &pb.Features{}
	}
	for _, o := range offers {
		raw := json.RawMessage(o.GetJson())
		if !json.Valid(raw) {
			continue
		}
		switch o.GetKind() {
		case pb.OfferKind_OFFER_KIND_RESOURCE:
			c.resources = append(c.resources, raw)
		case pb.OfferKind_OFFER_KIND_RESOURCE_TEMPLATE:
			c.templates = append(c.templates, raw)
		case pb.OfferKind_OFFER_KIND_PROMPT:
			c.prompts = append(c.prompts, raw)
		case pb.OfferKind_OFFER_KIND_EVENT:
			if e := eventForClients(raw); e != nil {
				c.events = append(c.events, e)
			}
		}
	}
	return c
}

var (
	notifyResourcesChanged = jsonrpc.Notification("notifications/resources/list_changed", nil)
	notifyPromptsChanged   = jsonrpc.Notification("notifications/prompts/list_changed", nil)
)

// setOffers takes a new catalogue from the coordinator's watch and tells
// clients which lists changed (not on the first, which changes nothing
// they saw).
func (g *Gateway) setOffers(m *pb.WatchToolsResponse, first bool) {
	next := newCatalogue(m.GetOffers(), m.GetFeatures())
	next.msg = m
	prev := g.offers.Swap(next)
	if prev != nil {
		close(prev.replaced)
	}
	if first || prev == nil {
		return
	}
	if !sameRaw(prev.resources, next.resources) || !sameRaw(prev.templates, next.templates) {
		g.broadcast(notifyResourcesChanged)
	}
	if !sameRaw(prev.prompts, next.prompts) {
		g.broadcast(notifyPromptsChanged)
	}
}

// toolMeta is a tool's _meta as its worker gave it, if it is a JSON
// object: one worker's bad _meta must not break every client's list.
func toolMeta(t *pb.Tool) json.RawMessage {
	b := bytes.TrimSpace(t.GetMetaJson())
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return nil
	}
	return b
}

func sameRaw(a, b []json.RawMessage) bool {
	return slices.EqualFunc(a, b, func(x, y json.RawMessage) bool { return string(x) == string(y) })
}

func sameTools(a, b []*pb.Tool) bool {
	return slices.EqualFunc(a, b, func(x, y *pb.Tool) bool { return proto.Equal(x, y) })
}

// A gateway's first answer from its catalogue (a list, or initialize's
// capabilities and serverInfo) waits until the catalogue is current: a
// host starts everything and lists at once, and a worker that attached
// just before must be in that list. The first list asks the coordinator
// for the catalogue as of now (it reads etcd for what its own watch has
// not delivered) and waits until the gateway's watch has delivered the
// same, at most currentWait; then it answers from what it has. After
// that the watch keeps the catalogue current, and clients hear
// list_changed when it changes.
const currentWait = 2 * time.Second

// awaitCurrent waits, once per gateway, until the catalogue is current.
// Callers that come meanwhile wait with the first, at most currentWait.
func (g *Gateway) awaitCurrent(ctx context.Context) {
	g.current.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), currentWait)
		defer cancel()
		resp, err := g.coord.ListTools(ctx, &pb.ListToolsRequest{})
		if err != nil {
			return
		}
		want := &pb.WatchToolsResponse{Tools: resp.GetTools(), Offers: resp.GetOffers(), Features: resp.GetFeatures()}
		g.awaitWatched(ctx, want)
	})
}

// awaitWatched waits until the watch has delivered want, or ctx is done.
func (g *Gateway) awaitWatched(ctx context.Context, want *pb.WatchToolsResponse) {
	for {
		c := g.offers.Load()
		var next <-chan struct{} = g.toolsCh
		if c != nil {
			if proto.Equal(c.msg, want) {
				return
			}
			next = c.replaced
		}
		select {
		case <-next:
		case <-ctx.Done():
			return
		}
	}
}

// currentOffers returns the catalogue, asking the coordinator when the
// watch has not delivered yet; an empty one if it cannot say.
func (g *Gateway) currentOffers(ctx context.Context) (*catalogue, error) {
	g.awaitCurrent(ctx)
	if c := g.offers.Load(); c != nil {
		return c, nil
	}
	resp, err := g.coord.ListTools(ctx, &pb.ListToolsRequest{})
	if err != nil {
		return nil, err
	}
	return newCatalogue(resp.GetOffers(), resp.GetFeatures()), nil
}

// listOffers answers resources/list, resources/templates/list,
// prompts/list and events/list from the catalogue, one page at a time.
func (g *Gateway) listOffers(ctx context.Context, m *jsonrpc.Message) (any, *jsonrpc.Error) {
	var p struct {
		Cursor *string `json:"cursor"`
	}
	json.Unmarshal(m.Params, &p)
	c, err := g.currentOffers(ctx)
	if err != nil {
		return nil, jsonrpc.Errorf(jsonrpc.CodeInternalError, "cannot list: the coordinator is unavailable")
	}
	field, all := "resources", c.resources
	switch m.Method {
	case "resources/templates/list":
		field, all = "resourceTemplates", c.templates
	case "prompts/list":
		field, all = "prompts", c.prompts
	case methodEventsList:
		field, all = "events", c.events // events.go
	}
	start := 0
	if p.Cursor != nil {
		n, ok := parseCursor(*p.Cursor)
		if !ok || n > len(all) {
			return nil, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "invalid cursor")
		}
		start = n
	}
	end := min(start+listPageSize, len(all))
	page := all[start:end]
	if page == nil {
		page = []json.RawMessage{}
	}
	out := map[string]any{field: page}
	if end < len(all) {
		out["nextCursor"] = makeCursor(end)
	}
	return out, nil
}

// Cursors are opaque to clients: an offset into the list, which moves if
// the list changes between pages (clients hear list_changed then).
func makeCursor(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("offset:" + strconv.Itoa(offset)))
}

func parseCursor(s string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 8 || string(b[:7]) != "offset:" {
		return 0, false
	}
	n, err := strconv.Atoi(string(b[7:]))
	return n, err == nil && n >= 0
}

// identity is the serverInfo and instructions the gateway shows its
// clients: those of the one MCP server every live worker fronts, if there
// is one, so that a gateway fronting one server shows it as a client
// talking to it directly would see it; the gateway's own otherwise.
func (g *Gateway) identity(ctx context.Context) (any, string) {
	c, err := g.currentOffers(ctx)
	if err != nil || len(c.features.GetServerInfoJson()) == 0 || !json.Valid(c.features.GetServerInfoJson()) {
		return g.serverInfo(), instructions
	}
	return json.RawMessage(c.features.GetServerInfoJson()), c.features.GetInstructions()
}

// capabilities are what the gateway advertises: tools and logging always;
// resources, prompts and completions only while some live worker offers
// them, with list_changed (the gateway tells of any worker's change) and
// subscribe when a worker serves subscriptions.
func (g *Gateway) capabilities(ctx context.Context) map[string]any {
	caps := map[string]any{
		"tools":   map[string]any{"listChanged": true},
		"logging": map[string]any{},
	}
	c, err := g.currentOffers(ctx)
	if err != nil {
		return caps
	}
	f := c.features
	if f.GetResources() || len(c.resources) > 0 || len(c.templates) > 0 {
		caps["resources"] = map[string]any{"listChanged": true, "subscribe": f.GetSubscribe()}
	}
	if f.GetPrompts() || len(c.prompts) > 0 {
		caps["prompts"] = map[string]any{"listChanged": true}
	}
	if f.GetCompletions() {
		caps["completions"] = map[string]any{}
	}
	return caps
}
