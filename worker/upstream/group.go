package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/mcpcancel/mcpcancel/worker"
)

// Group fronts several MCP servers as the tools of one worker. Each
// server, added by name, has an Adapter of its own: its own process or
// connection, upstream sessions, concurrency cap and per-tool Config
// (whose names are the server's own, unprefixed).
//
// With more than one server, every tool, prompt, resource and resource
// template name is prefixed with its server's name and PrefixSeparator
// ("github_create_issue"), whether or not it collides: a name never
// changes because another server started offering the same one. With one
// server, nothing is renamed and the server's serverInfo and instructions
// pass through, as with a lone Adapter. A call to a prefixed name reaches
// its server under the server's own name, and its cancellation and
// progress travel on that server's session, as for a lone Adapter.
//
// URIs are never renamed: a resources/read, subscription or completion of
// a URI goes to the server that lists that resource, or else to the first
// (in name order) whose template matches it. A URI or template that two
// servers list is offered by the first in name order only, and logged.
type Group struct {
	w   *worker.Worker
	log *slog.Logger

	mu      sync.Mutex // guards the fields below
	members []*member  // in name order
	sealed  bool       // a member registered: the prefixes are fixed
	running bool       // Run was called
	tools   map[string]toolRoute
	offers  offerRoutes
}

// PrefixSeparator joins a server's name and its tool or prompt name. It
// is one of the characters MCP allows in a tool name (A-Z a-z 0-9 _ - .)
// and none a server name may hold, so that a prefixed name is never
// ambiguous.
const PrefixSeparator = "_"

// serverName is what a server's name may be: it starts every prefixed
// name, so it holds only characters a tool name may, and no
// PrefixSeparator.
var serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,31}$`)

// ErrServerName means a Group was given a server name it cannot use.
var ErrServerName = errors.New("upstream: a server name is 1 to 32 letters, digits and '-', starting with a letter or digit")

// CheckServerName refuses a name a server of a Group cannot have, with
// an error wrapping ErrServerName.
func CheckServerName(name string) error {
	if !serverName.MatchString(name) {
		return fmt.Errorf("%w, not %q", ErrServerName, name)
	}
	return nil
}

// member is one server of a group and what its adapter last registered.
// Its calls go to a.handle and a.request, which an adapter always
// registers: they are fixed when the member is added, and read without
// the lock.
type member struct {
	g    *Group
	name string
	a    *Adapter

	// guarded by g.mu
	tools   []worker.Tool
	offered worker.Offers
}

// toolRoute is the server of a tool or prompt, and its name there.
type toolRoute struct {
	m    *member
	name string
}

// offerRoutes index the merged resources, templates and prompts.
type offerRoutes struct {
	resources map[string]*member // by URI
	templates []templateRoute    // in the order offered
	prompts   map[string]toolRoute
	events    map[string]toolRoute // event types, by group name (group_events.go)
}

type templateRoute struct {
	key  string
	tmpl *uritemplate.Template
	m    *member
}

// NewGroup returns an empty group registering on w; log (nil discards)
// reports names it cannot offer.
func NewGroup(w *worker.Worker, log *slog.Logger) *Group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Group{w: w, log: log}
}

// Add adds the server name, fronted by an adapter with opts, and returns
// that adapter (for its Ready, PID and WaitReady; the group runs it).
// Every server is added before Run. It panics unless exactly one of
// opts.Command and opts.URL is set, as New does.
func (g *Group) Add(name string, opts Options) (*Adapter, error) {
	if err := CheckServerName(name); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.sealed || g.running:
		return nil, fmt.Errorf("upstream: server %q added after the group started", name)
	case slices.ContainsFunc(g.members, func(m *member) bool { return m.name == name }):
		return nil, fmt.Errorf("upstream: two servers named %q", name)
	}
	m := &member{g: g, name: name}
	m.a = newAdapter(g.w, opts, m)
	i, _ := slices.BinarySearchFunc(g.members, name, func(m *member, n string) int { return strings.Compare(m.name, n) })
	g.members = slices.Insert(g.members, i, m)
	return m.a, nil
}

// Adapters returns the group's adapters by server name.
func (g *Group) Adapters() map[string]*Adapter {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]*Adapter, len(g.members))
	for _, m := range g.members {
		out[m.name] = m.a
	}
	return out
}

// Run runs every server's adapter until ctx is done, then stops them all
// and returns. It may be called once.
func (g *Group) Run(ctx context.Context) error {
	g.mu.Lock()
	if g.running {
		g.mu.Unlock()
		return errors.New("upstream: Group.Run called twice")
	}
	g.running = true
	members := slices.Clone(g.members)
	g.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(members))
	for i, m := range members {
		wg.Go(func() { // waited below
			if err := m.a.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("server %s: %w", m.name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitReady waits until every server's tools were registered, or one
// failed to start (its error, naming the server), or ctx is done.
func (g *Group) WaitReady(ctx context.Context) error {
	for name, a := range g.Adapters() {
		if err := a.WaitReady(ctx); err != nil {
			if ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("server %s: %w", name, err)
		}
	}
	return nil
}

// registrar is where an adapter registers what its server offers: its
// worker, or its group.
type registrar interface {
	setTools(tools []worker.Tool, h worker.Handler)
	setOffers(o worker.Offers, h worker.RequestHandler)
}

// workerRegistrar registers a lone adapter's offers as its worker's.
type workerRegistrar struct{ w *worker.Worker }

func (r workerRegistrar) setTools(tools []worker.Tool, h worker.Handler) { r.w.SetTools(tools, h) }
func (r workerRegistrar) setOffers(o worker.Offers, h worker.RequestHandler) {
	r.w.SetOffers(o, h)
}

// setTools takes the server's tools; h is m.a.handle, which the group
// calls itself.
func (m *member) setTools(tools []worker.Tool, _ worker.Handler) {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	m.tools = tools
	m.g.sealed = true
	m.g.setToolsLocked()
}

// setOffers takes the server's offers; h is m.a.request, which the group
// calls itself.
func (m *member) setOffers(o worker.Offers, _ worker.RequestHandler) {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	m.offered = o
	m.g.sealed = true
	m.g.setOffersLocked()
}

// nameLocked is m's name for its server's name: prefixed when the group
// fronts more than one server.
func (g *Group) nameLocked(m *member, name string) string {
	if len(g.members) == 1 {
		return name
	}
	return m.name + PrefixSeparator + name
}

// setToolsLocked gives the worker every server's tools, under their
// group names. It sets them under g.mu so that two servers' updates
// reach the worker in the order they were merged.
func (g *Group) setToolsLocked() {
	var all []worker.Tool
	routes := map[string]toolRoute{}
	for _, m := range g.members {
		for _, t := range m.tools {
			name := g.nameLocked(m, t.Name)
			if err := checkToolName(name); err != nil {
				g.log.Warn("not offering an upstream tool", "server", m.name, "tool", t.Name, "err", err)
				continue
			}
			routes[name] = toolRoute{m, t.Name}
			t.Name = name
			all = append(all, t)
		}
	}
	g.tools = routes
	g.w.SetTools(all, g.handleTool)
}

// handleTool sends a call to its tool's server, under the server's name
// for the tool.
func (g *Group) handleTool(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	g.mu.Lock()
	r, ok := g.tools[c.Tool]
	g.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: no fronted server offers the tool %q now", ErrUnavailable, c.Tool)
	}
	up := *c
	up.Tool = r.name
	return r.m.a.handle(ctx, &up)
}

// setOffersLocked gives the worker every server's resources, templates
// and prompts, under their group names.
func (g *Group) setOffersLocked() {
	var o worker.Offers
	r := offerRoutes{resources: map[string]*member{}, prompts: map[string]toolRoute{}, events: map[string]toolRoute{}}
	for _, m := range g.members {
		g.mergeResourcesLocked(m, &o, &r)
		for _, p := range m.offered.Prompts {
			cp := *p
			cp.Name = g.nameLocked(m, p.Name)
			r.prompts[cp.Name] = toolRoute{m, p.Name}
			o.Prompts = append(o.Prompts, &cp)
		}
		g.mergeEventsLocked(m, &o, &r)
		o.Completions = o.Completions || m.offered.Completions
		o.Subscribe = o.Subscribe || m.offered.Subscribe
	}
	if len(g.members) == 1 {
		o.ServerInfo, o.Instructions = g.members[0].offered.ServerInfo, g.members[0].offered.Instructions
	}
	g.offers = r
	g.w.SetOffers(o, g.request)
}

// mergeResourcesLocked adds m's resources and templates that no server
// before it offers.
func (g *Group) mergeResourcesLocked(m *member, o *worker.Offers, r *offerRoutes) {
	for _, res := range m.offered.Resources {
		if other := r.resources[res.URI]; other != nil {
			g.log.Warn("not offering a resource another server offers", "server", m.name, "uri", res.URI, "offered_by", other.name)
			continue
		}
		cp := *res
		cp.Name = g.nameLocked(m, res.Name)
		r.resources[res.URI] = m
		o.Resources = append(o.Resources, &cp)
	}
	for _, t := range m.offered.Templates {
		tmpl, err := uritemplate.New(t.URITemplate)
		if err != nil {
			continue // as the worker does: its URIs are not found
		}
		if i := slices.IndexFunc(r.templates, func(tr templateRoute) bool { return tr.key == t.URITemplate }); i >= 0 {
			g.log.Warn("not offering a resource template another server offers", "server", m.name, "template", t.URITemplate, "offered_by", r.templates[i].m.name)
			continue
		}
		cp := *t
		cp.Name = g.nameLocked(m, t.Name)
		r.templates = append(r.templates, templateRoute{t.URITemplate, tmpl, m})
		o.Templates = append(o.Templates, &cp)
	}
}

// owner is the server of a resource URI (or, for a completion, a URI
// template): the one that lists it, else the first whose template
// matches it; nil if none.
func (r *offerRoutes) owner(uri string) *member {
	if m := r.resources[uri]; m != nil {
		return m
	}
	for _, t := range r.templates {
		if t.key == uri {
			return t.m
		}
	}
	for _, t := range r.templates {
		if t.tmpl.Match(uri) != nil {
			return t.m
		}
	}
	return nil
}

// request sends a request other than tools/call to the server it is
// for, with the server's own names in it.
func (g *Group) request(ctx context.Context, c *worker.Call) (any, error) {
	m, up, err := g.route(c)
	if err != nil {
		return nil, err
	}
	return m.a.request(ctx, up)
}

// route finds c's server and returns c as that server is to see it.
func (g *Group) route(c *worker.Call) (*member, *worker.Call, error) {
	g.mu.Lock()
	r := g.offers
	g.mu.Unlock()
	up := *c
	switch c.Method {
	case worker.MethodResourcesRead, worker.MethodResourcesSubscribe, worker.MethodResourcesUnsubscribe:
		if m := r.owner(c.Tool); m != nil {
			return m, &up, nil
		}
		return nil, nil, mcp.ResourceNotFoundError(c.Tool)
	case worker.MethodPromptsGet:
		p, ok := r.prompts[c.Tool]
		if !ok {
			return nil, nil, invalidParams(fmt.Errorf("no prompt %q", c.Tool))
		}
		up.Tool = p.name
		return p.m, &up, renameIn(&up.Params, p.name, "name")
	case worker.MethodCompletionComplete:
		return g.routeCompletion(r, &up)
	case worker.MethodEventsPoll, worker.MethodEventsStream:
		return routeEvent(r, &up)
	}
	return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + c.Method}
}

// routeCompletion routes completion/complete by its reference: a prompt
// by its group name, a resource by its URI.
func (g *Group) routeCompletion(r offerRoutes, up *worker.Call) (*member, *worker.Call, error) {
	if name, ok := strings.CutPrefix(up.Tool, worker.RefPrompt); ok {
		p, ok := r.prompts[name]
		if !ok {
			return nil, nil, invalidParams(fmt.Errorf("no prompt %q", name))
		}
		up.Tool = worker.RefPrompt + p.name
		return p.m, up, renameIn(&up.Params, p.name, "ref", "name")
	}
	if uri, ok := strings.CutPrefix(up.Tool, worker.RefResource); ok {
		if m := r.owner(uri); m != nil {
			return m, up, nil
		}
		return nil, nil, mcp.ResourceNotFoundError(uri)
	}
	return nil, nil, invalidParams(fmt.Errorf("completion reference %q is neither a prompt nor a resource", up.Tool))
}

// renameIn sets the string at path in the JSON object *params to name,
// keeping every other field as it is.
func renameIn(params *json.RawMessage, name string, path ...string) error {
	out, err := setString(*params, name, path)
	if err != nil {
		return invalidParams(err)
	}
	*params = out
	return nil
}

func setString(obj json.RawMessage, name string, path []string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil || m == nil {
		return nil, fmt.Errorf("params: want an object with %q", path[0])
	}
	var v json.RawMessage
	var err error
	if len(path) == 1 {
		v, err = json.Marshal(name)
	} else {
		v, err = setString(m[path[0]], name, path[1:])
	}
	if err != nil {
		return nil, err
	}
	m[path[0]] = v
	return json.Marshal(m)
}
