package coordinator

import (
	"fmt"

	"bytes"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/yosida95/uritemplate/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// What a call can target besides tools: the resources, resource templates
// and prompts workers offer (their offers), and completions. A call names
// its method and its target; the view routes it to a worker that serves
// that target. Two workers that offer the same tool name, prompt name,
// resource URI or URI template are taken as replicas of one fleet: either
// may serve a call, and listings show the description of the first by
// worker name. A resource's exact URI is preferred to a template that
// matches it, whichever workers offer them.

// MCP methods a call record may name.
const (
	methodResourcesRead        = "resources/read"
	methodResourcesSubscribe   = "resources/subscribe"
	methodResourcesUnsubscribe = "resources/unsubscribe"
	methodPromptsGet           = "prompts/get"
	methodCompletionComplete   = "completion/complete"
	methodEventsPoll           = "events/poll"
	methodEventsStream         = "events/stream"
)

// Completion targets name their reference with one of these prefixes.
const (
	refPrompt   = "ref/prompt:"
	refResource = "ref/resource:"
)

// MaxOffers bounds the offers (resources, templates, prompts) of one
// worker; MaxOfferBytes one offer's description, and MaxTargetBytes a
// resource URI or any other call target.
const (
	MaxOffers      = 4096
	MaxOfferBytes  = 16 << 10
	MaxTargetBytes = 2048
)

// offerDef is an offer as stored in workers/<worker>.
type offerDef struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
	JSON []byte `json:"json"`
}

// featuresDef are a worker's features as stored.
type featuresDef struct {
	Resources   bool `json:"resources,omitempty"`
	Subscribe   bool `json:"subscribe,omitempty"`
	Prompts     bool `json:"prompts,omitempty"`
	Completions bool `json:"completions,omitempty"`
	// The fronted server's serverInfo and instructions.
	ServerInfo   []byte `json:"server_info,omitempty"`
	Instructions string `json:"instructions,omitempty"`
	// The worker runs a call before its record is durable (Start).
	RunsPlaced bool `json:"runs_placed,omitempty"`
}

var offerKinds = map[pb.OfferKind]string{
	pb.OfferKind_OFFER_KIND_RESOURCE:          "resource",
	pb.OfferKind_OFFER_KIND_RESOURCE_TEMPLATE: "template",
	pb.OfferKind_OFFER_KIND_PROMPT:            "prompt",
	pb.OfferKind_OFFER_KIND_EVENT:             "event",
}

func offerKind(s string) pb.OfferKind {
	for k, v := range offerKinds {
		if v == s {
			return k
		}
	}
	return pb.OfferKind_OFFER_KIND_UNSPECIFIED
}

func offerDefs(offers []*pb.Offer) []*offerDef {
	out := make([]*offerDef, 0, len(offers))
	for _, o := range offers {
		out = append(out, &offerDef{Kind: offerKinds[o.GetKind()], Key: o.GetKey(), JSON: o.GetJson()})
	}
	return out
}

func (o *offerDef) proto() *pb.Offer {
	return &pb.Offer{Kind: offerKind(o.Kind), Key: o.Key, Json: o.JSON}
}

func featuresOf(f *pb.Features) *featuresDef {
	if f == nil {
		return nil
	}
	return &featuresDef{Resources: f.GetResources(), Subscribe: f.GetSubscribe(), Prompts: f.GetPrompts(), Completions: f.GetCompletions(),
		ServerInfo: f.GetServerInfoJson(), Instructions: f.GetInstructions(), RunsPlaced: f.GetRunsPlaced()}
}

func (f *featuresDef) proto() *pb.Features {
	if f == nil {
		return &pb.Features{}
	}
	return &pb.Features{Resources: f.Resources, Subscribe: f.Subscribe, Prompts: f.Prompts, Completions: f.Completions,
		ServerInfoJson: f.ServerInfo, Instructions: f.Instructions, RunsPlaced: f.RunsPlaced}
}

// validateOffers checks a worker's offers: known kinds, keys and
// descriptions within bounds, templates that parse, no key twice.
// validateFeatures bounds what a worker says of the server it fronts.
func validateFeatures(f *pb.Features) error {
	if len(f.GetServerInfoJson())+len(f.GetInstructions()) > MaxOfferBytes {
		return invalid("the serverInfo and instructions of a worker's server are larger than %d bytes", MaxOfferBytes)
	}
	return nil
}

func validateOffers(offers []*pb.Offer) error {
	if len(offers) > MaxOffers {
		return invalid("a worker may offer at most %d resources, templates, prompts and event types", MaxOffers)
	}
	seen := map[string]bool{}
	for _, o := range offers {
		kind := offerKinds[o.GetKind()]
		if kind == "" {
			return invalid("offer %q has no kind", o.GetKey())
		}
		if err := validateTarget(o.GetKey()); err != nil {
			return err
		}
		if len(o.GetJson()) > MaxOfferBytes {
			return invalid("the description of %s %q is larger than %d bytes", kind, o.GetKey(), MaxOfferBytes)
		}
		if o.GetKind() == pb.OfferKind_OFFER_KIND_RESOURCE_TEMPLATE {
			if _, err := uritemplate.New(o.GetKey()); err != nil {
				return invalid("resource template %q does not parse: %v", o.GetKey(), err)
			}
		}
		if seen[kind+" "+o.GetKey()] {
			return invalid("%s %q offered twice", kind, o.GetKey())
		}
		seen[kind+" "+o.GetKey()] = true
	}
	return nil
}

// validateTarget accepts 1..MaxTargetBytes of UTF-8 without control
// characters: a resource URI, a prompt name, a completion reference.
func validateTarget(s string) error {
	if s == "" || len(s) > MaxTargetBytes || !utf8.ValidString(s) {
		return invalid("a call target must be 1 to %d bytes of UTF-8", MaxTargetBytes)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return invalid("call target %q has a control character", s)
		}
	}
	return nil
}

// validateMethodTarget checks a Begin's method and its target.
func validateMethodTarget(method, target string) error {
	switch method {
	case "", methodToolsCall:
		return validateToolName(target)
	case methodResourcesRead, methodResourcesSubscribe, methodResourcesUnsubscribe, methodPromptsGet, methodEventsPoll, methodEventsStream:
		return validateTarget(target)
	case methodCompletionComplete:
		if !strings.HasPrefix(target, refPrompt) && !strings.HasPrefix(target, refResource) {
			return invalid("a completion target starts with %q or %q", refPrompt, refResource)
		}
		return validateTarget(target)
	}
	return invalid("method %q is not routed to workers", method)
}

// routes is what one worker serves, indexed for placement.
type routes struct {
	resources map[string]bool
	templates []*uritemplate.Template
	prompts   map[string]bool
	events    map[string]bool // event type names
	features  featuresDef
}

func newRoutes(info *workerInfo) *routes {
	r := &routes{resources: map[string]bool{}, prompts: map[string]bool{}, events: map[string]bool{}}
	if info.Features != nil {
		r.features = *info.Features
	}
	for _, o := range info.Offers {
		switch o.Kind {
		case "resource":
			r.resources[o.Key] = true
		case "prompt":
			r.prompts[o.Key] = true
		case "event":
			r.events[o.Key] = true
		case "template":
			if t, err := uritemplate.New(o.Key); err == nil {
				r.templates = append(r.templates, t)
			}
		}
	}
	return r
}

// Match ranks of a worker for a call's target: an exact resource URI
// outranks a template that matches it.
const (
	rankNone = iota
	rankTemplate
	rankExact
)

// serves ranks how well e serves method on target, and says whether the
// worker vouches that the call may be run again (tools only).
func (e *workerEntry) serves(method, target string) (rank int, idempotent bool) {
	r := e.routes
	switch method {
	case "", methodToolsCall:
		if t := e.tools[target]; t != nil {
			return rankExact, t.Idempotent
		}
	case methodResourcesRead:
		return r.resource(target), false
	case methodResourcesSubscribe, methodResourcesUnsubscribe:
		if r.features.Subscribe {
			return r.resource(target), false
		}
	case methodPromptsGet:
		if r.prompts[target] {
			return rankExact, false
		}
	case methodEventsPoll, methodEventsStream:
		if r.events[target] {
			return rankExact, false
		}
	case methodCompletionComplete:
		if !r.features.Completions {
			return rankNone, false
		}
		if name, ok := strings.CutPrefix(target, refPrompt); ok && r.prompts[name] {
			return rankExact, false
		}
		if uri, ok := strings.CutPrefix(target, refResource); ok {
			for _, t := range r.templates {
				if t.Raw() == uri {
					return rankExact, false
				}
			}
			return r.resource(uri), false
		}
	}
	return rankNone, false
}

// resource ranks a resource URI: offered as such, or matching a template.
func (r *routes) resource(uri string) int {
	if r.resources[uri] {
		return rankExact
	}
	for _, t := range r.templates {
		if t.Match(uri) != nil {
			return rankTemplate
		}
	}
	return rankNone
}

// catalogue is the union of what live, undrained workers offer: tools and
// offers by name (the first worker by name describes each), features OR'ed.
func (v *view) catalogue() ([]*pb.Tool, []*pb.Offer, *pb.Features) {
	seenTool, seenOffer := map[string]bool{}, map[string]bool{}
	var tools []*pb.Tool
	var offers []*pb.Offer
	features := &pb.Features{}
	server, one := (*pb.Features)(nil), true // the one fronted server, while there is one
	for _, w := range v.snapshot() {
		if w.Draining {
			continue
		}
		for _, t := range w.Tools {
			if !seenTool[t.Name] {
				seenTool[t.Name] = true
				tools = append(tools, t)
			}
		}
		for _, o := range w.Offers {
			if k := o.GetKind().String() + " " + o.GetKey(); !seenOffer[k] {
				seenOffer[k] = true
				offers = append(offers, o)
			}
		}
		f := w.GetFeatures()
		features.Resources = features.Resources || f.GetResources()
		features.Subscribe = features.Subscribe || f.GetSubscribe()
		features.Prompts = features.Prompts || f.GetPrompts()
		features.Completions = features.Completions || f.GetCompletions()
		if server == nil {
			server = f
		}
		one = one && len(f.GetServerInfoJson()) > 0 && bytes.Equal(f.GetServerInfoJson(), server.GetServerInfoJson()) && f.GetInstructions() == server.GetInstructions()
	}
	if one && server != nil {
		features.ServerInfoJson, features.Instructions = server.GetServerInfoJson(), server.GetInstructions()
	}
	// Offers keep their workers' order, which a fronted server chose.
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	return tools, offers, features
}

// pinned returns worker name for a call pinned to it (a 2026-07-28 retry
// that resumes a call parked there): it must be live, not draining, and
// still serve the target. Its capacity is not checked: the parked call
// it resumes is its load already.
func (v *view) pinned(method, target, name string) (*workerEntry, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.workers[name]
	if e == nil || e.info.Draining {
		return nil, fmt.Errorf("%w: worker %s, which holds the call this one resumes, is gone or draining", ErrNotRetryable, name)
	}
	if rank, _ := e.serves(method, target); rank == rankNone {
		return nil, fmt.Errorf("%w: worker %s, which holds the call this one resumes, no longer serves %q", ErrNotRetryable, name, target)
	}
	return e, nil
}
