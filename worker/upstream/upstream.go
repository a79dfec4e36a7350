// Package upstream fronts an existing MCP server as an mcpcancel worker.
//
// An Adapter runs the server as a child process over stdio, or connects to
// it over Streamable HTTP, with the Go MCP SDK's client. It registers the
// server's tools (name, title, description, input and output schemas,
// annotations) as its worker's tools, and its resources, resource
// templates, prompts and completions as the worker's offers (offers.go),
// and re-registers them when the server sends a list_changed
// notification. Every request the gateway routes to the worker is
// forwarded: tools/call, resources/read, prompts/get, completion/complete,
// resources/subscribe and unsubscribe, and the events extension's
// events/poll and events/stream (events.go). Each call is forwarded with the
// client session's own fresh request id, never the MCP client's. When the
// coordinator decides a cancel, the worker cancels the handler's context:
// the SDK then sends the server notifications/cancelled naming the
// upstream id (and, over HTTP, closes the request's response stream), and
// the adapter stops relaying progress at once and drops any late result,
// whatever the server does.
//
// What the server says passes whole, in whichever revision the adapter
// negotiated with it: the _meta of its tools, resources, prompts and
// results, its serverInfo and instructions (shown by the gateway while it
// is the only server fronted), and every progress notification it sent
// before a result (call.go). Its requests toward the client, and the
// questions of its 2026-07-28 multi round-trips, go to the client of the
// call they serve; roots/list is its client session's (serverrequests.go).
//
// A Group fronts several servers from one worker (group.go): an adapter
// each, with its own sessions and policy, their names prefixed with the
// server's.
//
// A child process is supervised: if it dies, its in-flight calls fail with
// a clear error and it is restarted with backoff; its stderr is logged;
// on shutdown its whole process group is killed.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/internal/backoff"
	"github.com/mcpcancel/mcpcancel/worker"
)

// Errors a call can fail with; the worker reports their text to the client.
var (
	ErrUnavailable = errors.New("upstream: the MCP server is not available")
	ErrServerGone  = errors.New("upstream: the MCP server went away during the call")
	ErrTimeout     = errors.New("upstream: the call timed out")
)

// Options configures an Adapter. Exactly one of Command and URL is set.
type Options struct {
	// Command runs the server as a child process speaking MCP on stdio:
	// the program and its arguments (see SplitCommand).
	Command []string
	// Dir and Env are the child's working directory and extra environment
	// (added to this process's); both optional.
	Dir string
	Env []string
	// URL is a Streamable HTTP endpoint; the protocol version is
	// negotiated (2026-07-28 if the server supports it, else 2025-era).
	URL string
	// HTTPClient for URL (default http.DefaultClient).
	HTTPClient *http.Client
	// MaxConcurrency caps calls forwarded at once; more wait for a slot.
	// 0 means no cap.
	MaxConcurrency int
	// Config holds per-tool options; nil means defaults for every tool.
	Config *Config
	// ConnectWait bounds how long a call waits for the server to be
	// (re)connected before it fails (default 30s).
	ConnectWait time.Duration
	// MinBackoff and MaxBackoff bound the wait between restarts (default
	// 100ms and 10s); the wait doubles after each quick failure.
	MinBackoff, MaxBackoff time.Duration
	// TerminateWait is how long shutdown waits for the child to exit after
	// its stdin is closed, before killing its process group (default 2s).
	TerminateWait time.Duration
	// Sessions says whether each client session gets an upstream session
	// of its own (PerClient, the default) or all share one (Shared).
	Sessions SessionMode
	// MaxSessions caps the per-client upstream sessions: child processes
	// over stdio (default 32), MCP sessions over HTTP (default 1024).
	MaxSessions int
	// IdleTimeout closes a per-client upstream session unused this long
	// (default 10m).
	IdleTimeout time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// Adapter fronts one MCP server as the tools of one worker.
type Adapter struct {
	w    *worker.Worker
	reg  registrar // where the server's offers go: w, or a Group (group.go)
	opts Options
	log  *slog.Logger
	sem  chan struct{} // nil when unbounded

	tokens      progressRoutes
	pool        *pool
	subs        sharedSubs
	calls       inflight     // for requests toward the client (serverrequests.go)
	runs        runs         // upstream tools/calls, which a park outlives (park.go)
	taskSupport taskSupports // what the server's tools/list says of tasks (tasks.go)
	events      eventsConns  // the connections of the events extension (events.go)
	start       startFailure // why it could not be started, for WaitReady (conn.go)

	mu      sync.Mutex
	sess    *mcp.ClientSession // nil while (re)connecting
	changed chan struct{}      // closed and replaced when sess changes
	pid     int
	started bool
	ready   chan struct{} // closed once the tools were first registered
	once    sync.Once
}

// New returns an adapter registering its tools on w. It panics unless
// exactly one of opts.Command and opts.URL is set.
func New(w *worker.Worker, opts Options) *Adapter {
	return newAdapter(w, opts, workerRegistrar{w})
}

func newAdapter(w *worker.Worker, opts Options, reg registrar) *Adapter {
	if (len(opts.Command) == 0) == (opts.URL == "") {
		panic("upstream: set exactly one of Options.Command and Options.URL")
	}
	opts.setDefaults()
	a := &Adapter{w: w, reg: reg, opts: opts, log: opts.Logger.With("upstream", opts.describe()), changed: make(chan struct{}), ready: make(chan struct{})}
	if opts.MaxConcurrency > 0 {
		a.sem = make(chan struct{}, opts.MaxConcurrency)
	}
	a.tokens.m = map[string]*relay{}
	a.pool = newPool(a)
	if opts.Sessions == PerClient {
		w.OnSessionEnd(a.pool.end)
	}
	w.OnSessionEnd(a.subs.forgetSession)
	return a
}

// setDefaults fills in the default of every zero (or negative) field.
func (o *Options) setDefaults() {
	if o.ConnectWait <= 0 {
		o.ConnectWait = 30 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Second
	}
	if o.TerminateWait <= 0 {
		o.TerminateWait = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Config == nil {
		o.Config = &Config{}
	}
	if o.Sessions == "" {
		o.Sessions = PerClient
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = defaultSessionIdleClose
	}
}

func (o Options) describe() string {
	if o.URL != "" {
		return o.URL
	}
	return o.Command[0]
}

// Ready is closed once the server's tools were registered for the first
// time.
func (a *Adapter) Ready() <-chan struct{} { return a.ready }

// PID is the process id of the running child, 0 if none (or over HTTP).
func (a *Adapter) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pid
}

// Run connects to the server (starting it, for Command) and keeps it
// connected, restarting it with backoff whenever it dies, until ctx is
// done; then it stops the child and returns. Run may be called once; run
// the worker alongside it.
func (a *Adapter) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.started {
		a.mu.Unlock()
		return errors.New("upstream: Run called twice")
	}
	a.started = true
	a.mu.Unlock()
	// Runs end with Run's context, before the sessions they wait on close
	// (a session's close waits for its server's requests, which a parked
	// run holds); the last thing Run does is wait for them.
	defer a.runs.close()
	defer context.AfterFunc(ctx, a.runs.end)()
	a.pool.start(ctx)
	pooled := make(chan struct{})
	go func() { a.pool.run(ctx); close(pooled) }() // ends with ctx; waited below
	defer func() { <-pooled }()
	retry := backoff.Backoff{Min: a.opts.MinBackoff, Max: a.opts.MaxBackoff}
	for {
		start := time.Now()
		err := a.connectOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > 10*a.opts.MaxBackoff {
			retry.Reset()
		}
		wait := retry.Next()
		a.log.Warn("upstream MCP server disconnected; reconnecting", "err", err, "in", wait)
		if backoff.Sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// connectOnce runs one connection to the server until it ends or ctx is
// done.
func (a *Adapter) connectOnce(ctx context.Context) error {
	refresh, refreshOffers := make(chan struct{}, 1), make(chan struct{}, 1)
	poke := func(ch chan struct{}) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	opts := clientOptions(a, "")
	opts.ToolListChangedHandler = func(context.Context, *mcp.ToolListChangedRequest) { poke(refresh) }
	opts.ResourceListChangedHandler = func(context.Context, *mcp.ResourceListChangedRequest) { poke(refreshOffers) }
	opts.PromptListChangedHandler = func(context.Context, *mcp.PromptListChangedRequest) { poke(refreshOffers) }
	conn, err := a.dial(ctx, a.newClient(opts, ""), true)
	if err != nil {
		return err
	}
	ended := make(chan struct{})
	go func() { conn.sess.Wait(); close(ended) }() // ends when conn is closed; waited below
	defer func() { conn.close(); <-ended }()
	if err := a.registerOffers(ctx, conn.sess); err != nil {
		return err
	}
	if err := a.registerTools(ctx, conn.sess); err != nil {
		return err
	}
	a.setSession(conn.sess, conn.pid)
	defer a.setSession(nil, 0) // before the close: no new call picks a dying session
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ended:
			// Reap the child, for its exit status.
			return fmt.Errorf("the session ended: %v", conn.close())
		case <-refresh:
			if err := a.registerTools(ctx, conn.sess); err != nil {
				a.log.Warn("re-listing tools after tools/list_changed", "err", err)
			}
		case <-refreshOffers:
			if err := a.registerOffers(ctx, conn.sess); err != nil {
				a.log.Warn("re-listing resources and prompts after list_changed", "err", err)
			}
		}
	}
}

// newClient is an MCP client with opts. It has no
// ProgressNotificationHandler: the SDK would deliver progress on a
// goroutine of its own, after the result it preceded. The transport relays
// it in wire order instead (inWireOrder, tapProgress).
func (a *Adapter) newClient(opts *mcp.ClientOptions, key string) *mcp.Client {
	impl := clientInfo
	client := mcp.NewClient(&impl, opts)
	client.AddReceivingMiddleware(a.relayToClient(key)) // requests toward the client (serverrequests.go)
	return client
}

// clientInfo is the adapter's client, as it names itself to servers.
var clientInfo = mcp.Implementation{Name: "mcpcancel-upstream", Version: "1"}

func (a *Adapter) setSession(s *mcp.ClientSession, pid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sess, a.pid = s, pid
	close(a.changed)
	a.changed = make(chan struct{})
}

// session waits, up to ConnectWait, for a connected session.
func (a *Adapter) session(ctx context.Context) (*mcp.ClientSession, error) {
	t := time.NewTimer(a.opts.ConnectWait)
	defer t.Stop()
	for {
		a.mu.Lock()
		s, changed := a.sess, a.changed
		a.mu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			return nil, fmt.Errorf("%w: not connected after %v", ErrUnavailable, a.opts.ConnectWait)
		}
	}
}
