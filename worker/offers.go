package worker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// MCP methods a worker answers besides tools/call. Each is a call like a
// tool's: settled once with the coordinator, its handler's context
// cancelled the moment the call is.
const (
	MethodToolsCall            = "tools/call"
	MethodResourcesRead        = "resources/read"
	MethodResourcesSubscribe   = "resources/subscribe"
	MethodResourcesUnsubscribe = "resources/unsubscribe"
	MethodPromptsGet           = "prompts/get"
	MethodCompletionComplete   = "completion/complete"
)

// Completion targets: a completion call's Target is one of these prefixes
// followed by the prompt's name or the resource's URI (or URI template).
const (
	RefPrompt   = "ref/prompt:"
	RefResource = "ref/resource:"
)

// Descriptions of what a worker offers besides tools, in MCP's terms.
type (
	Resource         = mcp.Resource
	ResourceTemplate = mcp.ResourceTemplate
	Prompt           = mcp.Prompt
)

// Handlers of resources, prompts and completions. The contract is a
// tool's (see Handler): ctx is done when the call is cancelled, times out
// or loses its caller, and the result goes out only if the call completes
// first. An error that is a *jsonrpc.Error (from the go-sdk's jsonrpc
// package, such as mcp.ResourceNotFoundError) is the client's answer; any
// other error fails the call with its text.
type (
	ResourceHandler   func(ctx context.Context, c *Call) (*mcp.ReadResourceResult, error)
	PromptHandler     func(ctx context.Context, c *Call) (*mcp.GetPromptResult, error)
	CompletionHandler func(ctx context.Context, c *Call) (*mcp.CompleteResult, error)
)

// RequestHandler answers any method but tools/call with its MCP result
// (any JSON-encodable value); it tells them apart by Call.Method. It is
// for workers that relay another server's answers, such as the upstream
// adapter. Its errors are as a ResourceHandler's.
type RequestHandler func(ctx context.Context, c *Call) (any, error)

// Offers is everything a worker offers besides tools: its resources,
// resource templates and prompts, and whether it answers completions and
// subscriptions.
type Offers struct {
	Resources   []*Resource
	Templates   []*ResourceTemplate
	Prompts     []*Prompt
	Completions bool
	Subscribe   bool
	// Events are the event types of the events extension (events.go).
	Events []*EventType
	// ServerInfo and Instructions are those of the MCP server the worker
	// fronts, if it fronts one: while every live worker fronts the same
	// server, the gateway shows them to its clients as its own.
	ServerInfo   *mcp.Implementation
	Instructions string
}

// offered is what the worker serves besides tools, and how.
type offered struct {
	resources map[string]*offer
	templates []*offer
	prompts   map[string]*offer
	events    map[string]*offer // event types, by name
	order     []*offer
	complete  RequestHandler // nil: no completions
	subscribe RequestHandler // nil: no subscriptions
	generic   RequestHandler // set by SetOffers: answers every method
	server    []byte         // the fronted server's serverInfo, as JSON
	instruct  string         // and its instructions
}

type offer struct {
	kind  pb.OfferKind
	key   string
	desc  any
	tmpl  *uritemplate.Template
	serve RequestHandler
}

func newOffered() *offered {
	return &offered{resources: map[string]*offer{}, prompts: map[string]*offer{}, events: map[string]*offer{}}
}

// HandleResource registers a resource, served by h. It panics on a
// resource without a URI, one registered twice, or a nil handler.
func (w *Worker) HandleResource(r *Resource, h ResourceHandler) {
	if r == nil || r.URI == "" || h == nil {
		panic("worker: HandleResource needs a resource URI and a handler")
	}
	w.addOffer(&offer{kind: pb.OfferKind_OFFER_KIND_RESOURCE, key: r.URI, desc: r, serve: resultOf(h)})
}

// HandleResourceTemplate registers a resource template (RFC 6570): h
// serves every resources/read of a URI that matches it and no resource's
// exact URI. It panics on a template that does not parse, one registered
// twice, or a nil handler.
func (w *Worker) HandleResourceTemplate(t *ResourceTemplate, h ResourceHandler) {
	if t == nil || h == nil {
		panic("worker: HandleResourceTemplate needs a template and a handler")
	}
	tmpl, err := uritemplate.New(t.URITemplate)
	if err != nil || t.URITemplate == "" {
		panic(fmt.Sprintf("worker: resource template %q does not parse: %v", t.URITemplate, err))
	}
	w.addOffer(&offer{kind: pb.OfferKind_OFFER_KIND_RESOURCE_TEMPLATE, key: t.URITemplate, desc: t, tmpl: tmpl, serve: resultOf(h)})
}

// HandlePrompt registers a prompt, served by h; Call.Arguments holds the
// prompt's arguments. It panics on a prompt without a name, one
// registered twice, or a nil handler.
func (w *Worker) HandlePrompt(p *Prompt, h PromptHandler) {
	if p == nil || p.Name == "" || h == nil {
		panic("worker: HandlePrompt needs a prompt name and a handler")
	}
	w.addOffer(&offer{kind: pb.OfferKind_OFFER_KIND_PROMPT, key: p.Name, desc: p, serve: resultOf(h)})
}

// HandleCompletion registers the handler of completion/complete for the
// worker's prompts and resource templates; Call.Params holds the
// request's params (see mcp.CompleteParams and Call.Bind).
func (w *Worker) HandleCompletion(h CompletionHandler) {
	if h == nil {
		panic("worker: HandleCompletion needs a handler")
	}
	w.mu.Lock()
	w.offered.complete = resultOf(h)
	w.toolsGen++
	w.mu.Unlock()
	w.ctrl.toolsChanged()
}

// HandleSubscriptions registers the handler of resources/subscribe and
// resources/unsubscribe (Call.Method tells them apart; Call.URI names the
// resource) for the worker's resources: the client gets {} once h returns
// nil.
func (w *Worker) HandleSubscriptions(h func(ctx context.Context, c *Call) error) {
	if h == nil {
		panic("worker: HandleSubscriptions needs a handler")
	}
	w.mu.Lock()
	w.offered.subscribe = func(ctx context.Context, c *Call) (any, error) {
		if err := h(ctx, c); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	}
	w.toolsGen++
	w.mu.Unlock()
	w.ctrl.toolsChanged()
}

// SetOffers replaces everything the worker offers besides tools, all
// answered by h, and re-registers it with the coordinator at once if
// attached, as SetTools does for tools. With o.Completions and
// o.Subscribe, h also answers completion/complete, resources/subscribe
// and resources/unsubscribe.
func (w *Worker) SetOffers(o Offers, h RequestHandler) {
	if h == nil {
		panic("worker: SetOffers needs a handler")
	}
	next := newOffered()
	next.generic = h
	for _, r := range o.Resources {
		next.add(&offer{kind: pb.OfferKind_OFFER_KIND_RESOURCE, key: r.URI, desc: r, serve: h})
	}
	for _, t := range o.Templates {
		tmpl, err := uritemplate.New(t.URITemplate)
		if err != nil {
			continue // a server's template we cannot route to; its URIs are not found
		}
		next.add(&offer{kind: pb.OfferKind_OFFER_KIND_RESOURCE_TEMPLATE, key: t.URITemplate, desc: t, tmpl: tmpl, serve: h})
	}
	for _, p := range o.Prompts {
		next.add(&offer{kind: pb.OfferKind_OFFER_KIND_PROMPT, key: p.Name, desc: p, serve: h})
	}
	for _, e := range o.Events {
		if e.Name != "" && json.Valid(e.JSON) {
			next.add(&offer{kind: pb.OfferKind_OFFER_KIND_EVENT, key: e.Name, desc: e, serve: h})
		}
	}
	if o.Completions {
		next.complete = h
	}
	if o.Subscribe {
		next.subscribe = h
	}
	if o.ServerInfo != nil {
		next.server, _ = json.Marshal(o.ServerInfo)
		next.instruct = o.Instructions
	}
	w.mu.Lock()
	w.offered = next
	w.toolsGen++
	w.mu.Unlock()
	w.ctrl.toolsChanged()
}

func (w *Worker) addOffer(o *offer) {
	w.mu.Lock()
	if !w.offered.add(o) {
		w.mu.Unlock()
		panic(fmt.Sprintf("worker: %q registered twice", o.key))
	}
	w.toolsGen++
	w.mu.Unlock()
	w.ctrl.toolsChanged()
}

// add indexes o; it reports false for a key already offered (SetOffers
// keeps the first).
func (f *offered) add(o *offer) bool {
	switch o.kind {
	case pb.OfferKind_OFFER_KIND_RESOURCE:
		if f.resources[o.key] != nil {
			return false
		}
		f.resources[o.key] = o
	case pb.OfferKind_OFFER_KIND_PROMPT:
		if f.prompts[o.key] != nil {
			return false
		}
		f.prompts[o.key] = o
	case pb.OfferKind_OFFER_KIND_EVENT:
		if f.events[o.key] != nil {
			return false
		}
		f.events[o.key] = o
	default:
		for _, t := range f.templates {
			if t.key == o.key {
				return false
			}
		}
		f.templates = append(f.templates, o)
	}
	f.order = append(f.order, o)
	return true
}

// resource finds what serves a URI: the resource itself, else the first
// template that matches it.
func (f *offered) resource(uri string) *offer {
	if o := f.resources[uri]; o != nil {
		return o
	}
	for _, t := range f.templates {
		if t.tmpl.Match(uri) != nil {
			return t
		}
	}
	return nil
}

// handler finds what answers method on target; nil if nothing does.
func (f *offered) handler(method, target string) RequestHandler {
	switch method {
	case MethodResourcesRead:
		if o := f.resource(target); o != nil {
			return o.serve
		}
	case MethodPromptsGet:
		if o := f.prompts[target]; o != nil {
			return o.serve
		}
	case MethodCompletionComplete:
		return f.complete
	case MethodEventsPoll, MethodEventsStream:
		if o := f.events[target]; o != nil {
			return o.serve
		}
	case MethodResourcesSubscribe, MethodResourcesUnsubscribe:
		return f.subscribe
	}
	return nil
}

// proto lists the offers and features for the coordinator.
func (f *offered) proto() ([]*pb.Offer, *pb.Features) {
	out := make([]*pb.Offer, 0, len(f.order))
	for _, o := range f.order {
		b, err := json.Marshal(o.desc)
		if err != nil {
			continue
		}
		out = append(out, &pb.Offer{Kind: o.kind, Key: o.key, Json: b})
	}
	features := &pb.Features{
		Resources:      len(f.resources) > 0 || len(f.templates) > 0 || f.subscribe != nil,
		Subscribe:      f.subscribe != nil,
		Prompts:        len(f.prompts) > 0,
		Completions:    f.complete != nil,
		ServerInfoJson: f.server, Instructions: f.instruct,
		RunsPlaced: true, // execute.go: fence 0 with a placement
	}
	return out, features
}

// resultOf adapts a typed handler to a RequestHandler, keeping a nil
// result nil (so that runHandler reports it).
func resultOf[R any](h func(context.Context, *Call) (*R, error)) RequestHandler {
	return func(ctx context.Context, c *Call) (any, error) {
		r, err := h(ctx, c)
		if r == nil {
			return nil, err
		}
		return r, err
	}
}
