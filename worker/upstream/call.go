package upstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// errToolTimeout is the cause of a context ended by a tool's own timeout.
var errToolTimeout = errors.New("upstream: tool timeout")

// runTool runs one call on the server, as a run's (park.go). Its ctx is
// cancelled when the call that owns the run ends (the coordinator settles
// it without us), or when its park is abandoned; the SDK then tells the
// server (notifications/cancelled with the id it chose), and the result,
// if one still comes, is dropped.
func (a *Adapter) runTool(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	tc := a.opts.Config.Tool(c.Tool)
	// The upstream session first: starting a client session's own server
	// (per-client, stdio) is bounded by ConnectWait, not by the tool's
	// timeout, which bounds the tool.
	s, done, err := a.sessionFor(ctx, c)
	if err != nil {
		return nil, a.callFailed(ctx, c, tc, err)
	}
	var upErr error
	defer func() { done(upErr) }()
	if tc.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(tc.Timeout), errToolTimeout)
		defer cancel()
	}
	release, err := a.acquire(ctx)
	if err != nil {
		return nil, callErr(ctx, c, tc, err)
	}
	defer release()
	defer a.calls.add(runOf(ctx), s)()
	r := a.tokens.add(ctx, c)
	defer a.tokens.remove(r)
	ctx = withRelay(ctx, r)
	res, err := a.callTool(ctx, s, c, r)
	if err != nil {
		upErr = err
		return nil, a.callFailed(ctx, c, tc, err)
	}
	if a.opts.URL == "" {
		r.awaitTrailing(ctx)
	}
	return res, nil
}

// callFailed explains why a call got no result.
func (a *Adapter) callFailed(ctx context.Context, c *worker.Call, tc ToolConfig, err error) error {
	switch {
	case ctx.Err() != nil:
		return callErr(ctx, c, tc, ctx.Err())
	case errors.Is(err, ErrServerGone) || errors.Is(err, ErrUnavailable):
		// The worker lost its server, not the tool its call: an idempotent
		// tool's call may be retried on another worker.
		return worker.Unavailable(err)
	default:
		return err
	}
}

func (a *Adapter) callTool(ctx context.Context, s *mcp.ClientSession, c *worker.Call, r *relay) (*worker.Result, error) {
	p := &mcp.CallToolParams{Name: c.Tool, Arguments: c.Arguments}
	if r.token != "" {
		p.SetProgressToken(r.token)
	}
	setLogLevel(p, c.LogLevel())
	withTrace(ctx, p) // trace.go
	res, err := s.CallTool(ctx, p)
	switch {
	case err == nil:
		return toolResult(res), nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.As(err, new(*jsonrpc.Error)):
		// The server answered with a JSON-RPC error: a protocol fault, such
		// as arguments its schema refuses.
		return nil, fmt.Errorf("the upstream MCP server refused the call: %w", err)
	default:
		// Anything else is the connection failing under the call (EOF when
		// a child dies, a reset over HTTP).
		return nil, fmt.Errorf("%w (%v); the adapter is reconnecting to it", ErrServerGone, err)
	}
}

// callErr explains an ended context: the tool's own timeout is a failure
// the user should read as such.
func callErr(ctx context.Context, c *worker.Call, tc ToolConfig, err error) error {
	if errors.Is(context.Cause(ctx), errToolTimeout) {
		return fmt.Errorf("%w: %s took longer than its %v timeout and was cancelled upstream", ErrTimeout, c.Tool, time.Duration(tc.Timeout))
	}
	return err
}

// acquire takes a concurrency slot, if MaxConcurrency is set.
func (a *Adapter) acquire(ctx context.Context) (func(), error) {
	if a.sem == nil {
		return func() {}, nil
	}
	select {
	case a.sem <- struct{}{}:
		return func() { <-a.sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// progressRoutes maps the progress tokens the adapter sends upstream to
// the calls they belong to.
type progressRoutes struct {
	mu   sync.Mutex
	m    map[string]*relay
	next uint64
}

// relay forwards one call's upstream progress while its context lives.
type relay struct {
	token string // empty when the client asked for no progress
	ctx   context.Context
	call  *worker.Call
	stop  func() bool

	mu     sync.Mutex // held across a send, so none follows close
	closed bool
	last   float64       // the last progress relayed, and its total
	total  float64       //
	moved  chan struct{} // closed and replaced on each progress relayed
}

// Progress the server wrote after its result. Some stdio servers write
// notifications from a goroutine of their own and responses from the
// handler's (mcp-go's does), so a tool's progress, sent before its
// result, may reach the wire after it, even all of it. Nothing on the
// wire says whether more is coming, so over stdio the adapter holds a
// result whose progress has not reached its total while progress may
// still trail it: until none came for trailingQuiet, at most trailingMax
// in all. That is the price of a call that asked for progress and got
// none, or none up to its total; a call that asked for none, or whose
// progress reached its total, waits for nothing. Over HTTP a request's
// stream ends with its response, so nothing trails it.
const (
	trailingQuiet = 50 * time.Millisecond
	trailingMax   = time.Second
)

// awaitTrailing waits for the progress that trails the server's result.
func (r *relay) awaitTrailing(ctx context.Context) {
	if r.token == "" {
		return
	}
	limit := time.NewTimer(trailingMax)
	defer limit.Stop()
	quiet := time.NewTimer(trailingQuiet)
	defer quiet.Stop()
	for {
		r.mu.Lock()
		done := r.closed || r.total > 0 && r.last >= r.total
		moved := r.moved
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-moved:
			quiet.Reset(trailingQuiet)
		case <-quiet.C:
			return
		case <-limit.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// add routes a fresh token to c, if c wants progress. The route closes as
// soon as ctx is done.
func (p *progressRoutes) add(ctx context.Context, c *worker.Call) *relay {
	r := &relay{ctx: ctx, call: c}
	if !c.WantsProgress() {
		return r // no token: nothing is relayed, nothing trails
	}
	r.moved = make(chan struct{})
	p.mu.Lock()
	p.next++
	r.token = "mcpcancel-" + strconv.FormatUint(p.next, 10)
	p.m[r.token] = r
	p.mu.Unlock()
	r.stop = context.AfterFunc(ctx, r.close)
	return r
}

func (p *progressRoutes) remove(r *relay) {
	if r.token == "" {
		return
	}
	r.stop()
	r.close()
	p.mu.Lock()
	delete(p.m, r.token)
	p.mu.Unlock()
}

// relay forwards one progress notification to its call, if it has one.
func (p *progressRoutes) relay(params *mcp.ProgressNotificationParams) {
	tok, ok := params.ProgressToken.(string)
	if !ok {
		return
	}
	p.mu.Lock()
	r := p.m[tok]
	p.mu.Unlock()
	if r != nil {
		r.send(params.Progress, params.Total, params.Message)
	}
}

func (r *relay) send(progress, total float64, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.ctx.Err() != nil {
		return
	}
	r.call.Progress(progress, total, msg)
	r.last, r.total = progress, total
	close(r.moved)
	r.moved = make(chan struct{})
}

func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}
