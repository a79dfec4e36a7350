package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// Everything but tools: the server's resources, resource templates and
// prompts become the worker's offers, and its answers to resources/read,
// prompts/get, completion/complete, resources/subscribe and
// resources/unsubscribe are relayed as they come, JSON-RPC errors
// included (a resource the server does not know is its own error, not
// the gateway's). The adapter offers only what the server's initialize
// result declares, so the gateway advertises what its servers offer.

// registerOffers lists the server's resources, templates and prompts and
// makes them the worker's.
func (a *Adapter) registerOffers(ctx context.Context, s *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.ConnectWait)
	defer cancel()
	caps := &mcp.ServerCapabilities{}
	if r := s.InitializeResult(); r != nil && r.Capabilities != nil {
		caps = r.Capabilities
	}
	var o worker.Offers
	if caps.Resources != nil {
		for r, err := range s.Resources(ctx, nil) {
			if err != nil {
				return fmt.Errorf("listing resources: %w", err)
			}
			o.Resources = append(o.Resources, r)
		}
		for t, err := range s.ResourceTemplates(ctx, nil) {
			if err != nil {
				return fmt.Errorf("listing resource templates: %w", err)
			}
			o.Templates = append(o.Templates, t)
		}
		o.Subscribe = caps.Resources.Subscribe
	}
	if caps.Prompts != nil {
		for p, err := range s.Prompts(ctx, nil) {
			if err != nil {
				return fmt.Errorf("listing prompts: %w", err)
			}
			o.Prompts = append(o.Prompts, p)
		}
	}
	o.Completions = caps.Completions != nil
	events, err := a.listEvents(ctx, s, caps) // events.go
	if err != nil {
		return err
	}
	o.Events = events
	if r := s.InitializeResult(); r != nil {
		o.ServerInfo, o.Instructions = r.ServerInfo, r.Instructions
	}
	a.reg.setOffers(o, a.request)
	a.log.Info("registered the upstream's resources and prompts", "resources", len(o.Resources), "templates", len(o.Templates), "prompts", len(o.Prompts), "event_types", len(o.Events))
	return nil
}

// requestSession is sessionFor for a request other than tools/call: a
// session that cannot be had makes the call unavailable (it may be
// retried on another worker), unless every session is in use.
func (a *Adapter) requestSession(ctx context.Context, c *worker.Call) (*mcp.ClientSession, func(error), error) {
	s, done, err := a.sessionFor(ctx, c)
	if err != nil && !errors.Is(err, ErrSessionsFull) {
		err = worker.Unavailable(err)
	}
	return s, done, err
}

// request forwards one request other than tools/call. Like a tool call,
// its ctx is cancelled when the coordinator settles the call without us,
// and the SDK then tells the server (notifications/cancelled).
func (a *Adapter) request(ctx context.Context, c *worker.Call) (any, error) {
	if isEvents(c) {
		return a.forwardEvents(ctx, c) // events.go
	}
	release, err := a.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	s, done, err := a.requestSession(ctx, c)
	if err != nil {
		return nil, err
	}
	var upErr error
	defer func() { done(upErr) }()
	if skip := a.sharedSubscription(c); skip {
		return struct{}{}, nil // another client session still wants the resource
	}
	res, err := forward(withCall(ctx, c), s, c)
	var rpcErr *jsonrpc.Error
	switch {
	case err == nil:
		return neutral(res), nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, &rpcErr):
		return nil, rpcErr // the server's own answer, for the client
	default:
		upErr = fmt.Errorf("%w (%v); the adapter is reconnecting to it", ErrServerGone, err)
		return nil, worker.Unavailable(upErr)
	}
}

// forward sends c's request on s with s's own request id.
func forward(ctx context.Context, s *mcp.ClientSession, c *worker.Call) (any, error) {
	switch c.Method {
	case worker.MethodResourcesRead:
		return s.ReadResource(ctx, &mcp.ReadResourceParams{URI: c.URI()})
	case worker.MethodPromptsGet:
		var p mcp.GetPromptParams
		if err := c.BindParams(&p); err != nil {
			return nil, invalidParams(err)
		}
		return s.GetPrompt(ctx, &p)
	case worker.MethodCompletionComplete:
		var p mcp.CompleteParams
		if err := c.BindParams(&p); err != nil {
			return nil, invalidParams(err)
		}
		return s.Complete(ctx, &p)
	case worker.MethodResourcesSubscribe:
		return struct{}{}, s.Subscribe(ctx, &mcp.SubscribeParams{URI: c.URI()})
	case worker.MethodResourcesUnsubscribe:
		return struct{}{}, s.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: c.URI()})
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "method not found: " + c.Method}
}

func invalidParams(err error) error {
	b, _ := json.Marshal(err.Error())
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Invalid params", Data: b}
}
