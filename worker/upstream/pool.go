package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// SessionMode says how client sessions map onto the upstream server.
type SessionMode string

const (
	// PerClient gives each client session its own upstream session, so a
	// stateful server (log level, subscriptions, session resources) sees
	// each client apart, as if it talked to the server directly. Over
	// stdio that is a child process per client session, at most
	// MaxSessions of them; over HTTP one MCP session per client session.
	// Calls that belong to no session (2026-07-28 requests) use the
	// shared connection. This is the default.
	PerClient SessionMode = "per-client"
	// Shared forwards every client's calls over one connection: the
	// cheapest, right for stateless servers.
	Shared SessionMode = "shared"
)

// ParseSessionMode reads a --upstream-sessions value.
func ParseSessionMode(s string) (SessionMode, error) {
	switch m := SessionMode(s); m {
	case PerClient, Shared:
		return m, nil
	case "":
		return PerClient, nil
	}
	return "", fmt.Errorf("upstream sessions must be %q or %q, not %q", PerClient, Shared, s)
}

// ErrSessionsFull fails a call from a new client session when every
// upstream session is in use by a call and none can be closed to make
// room.
var ErrSessionsFull = errors.New("upstream: every upstream session is busy")

// Defaults for the per-client pool.
const (
	defaultMaxSessions      = 32
	defaultMaxHTTPSessions  = 1024
	defaultSessionIdleClose = 10 * time.Minute
)

// pool keeps one upstream connection per client session. When it is full,
// a new session closes the least recently used one that has no call in
// flight (that client's upstream state is lost; its next call starts
// afresh); when every one has a call in flight, the new session's call
// fails with ErrSessionsFull at once rather than queueing behind calls
// that may run for minutes. Sessions idle for IdleTimeout are closed, and
// so is a client session's as soon as the client session ends.
type pool struct {
	a   *Adapter
	max int

	mu     sync.Mutex
	ctx    context.Context // the adapter's Run context; nil before Run
	m      map[string]*clientConn
	closed bool
	wg     sync.WaitGroup // one watcher per connection
}

// clientConn is one client session's upstream connection.
type clientConn struct {
	key   string
	ready chan struct{} // closed once dialled (conn or err set)
	conn  *conn
	err   error

	// Guarded by pool.mu.
	busy int       // calls in flight
	last time.Time // when the last call ended
	gone bool      // removed from the pool

	levelMu sync.Mutex
	level   string // the level last sent upstream, or being sent; guarded by levelMu
}

func newPool(a *Adapter) *pool {
	p := &pool{a: a, m: map[string]*clientConn{}, max: a.opts.MaxSessions}
	if p.max <= 0 {
		p.max = defaultMaxSessions
		if a.opts.URL != "" {
			p.max = defaultMaxHTTPSessions
		}
	}
	return p
}

// start lets the pool dial on ctx, the adapter's Run context.
func (p *pool) start(ctx context.Context) {
	p.mu.Lock()
	p.ctx = ctx
	p.mu.Unlock()
}

// run reaps idle sessions until ctx is done, then closes every session.
func (p *pool) run(ctx context.Context) {
	idle := p.a.opts.IdleTimeout
	t := time.NewTicker(max(idle/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			p.closeAll()
			return
		case now := <-t.C:
			p.reap(now)
		}
	}
}

// get returns the connection of a client session, dialling it if need
// be, and counts a call in flight on it until release. A call that found
// the server gone passes ErrServerGone to release: the connection is
// dropped at once, so the session's next call starts a new one rather
// than racing the watcher that notices the end.
func (p *pool) get(ctx context.Context, key string) (*clientConn, func(error), error) {
	cc, dial, err := p.take(key)
	if err != nil {
		return nil, nil, err
	}
	release := func(err error) { p.release(cc, err) }
	if dial {
		p.dial(cc)
	}
	select {
	case <-cc.ready:
	case <-ctx.Done():
		release(nil)
		return nil, nil, ctx.Err()
	}
	if cc.err != nil {
		release(nil)
		return nil, nil, cc.err
	}
	return cc, release, nil
}

// take finds or makes the session's entry, counting the call on it; dial
// says the caller must dial it.
func (p *pool) take(key string) (*clientConn, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.ctx == nil {
		return nil, false, fmt.Errorf("%w: the adapter is not running", ErrUnavailable)
	}
	if cc := p.m[key]; cc != nil {
		cc.busy++
		return cc, false, nil
	}
	var victim *clientConn
	if len(p.m) >= p.max {
		victim = p.lruIdleLocked()
		if victim == nil {
			return nil, false, fmt.Errorf("%w: all %d are running calls of other client sessions; try again shortly", ErrSessionsFull, p.max)
		}
		p.removeLocked(victim)
	}
	cc := &clientConn{key: key, ready: make(chan struct{}), busy: 1}
	p.m[key] = cc
	if victim != nil {
		p.a.log.Info("closing the least recently used upstream session to make room", "max", p.max)
		p.wg.Go(func() { victim.close() })
	}
	return cc, true, nil
}

// lruIdleLocked is the dialled session without calls that was used least
// recently, or nil.
func (p *pool) lruIdleLocked() *clientConn {
	var v *clientConn
	for _, cc := range p.m {
		if cc.busy == 0 && cc.conn != nil && (v == nil || cc.last.Before(v.last)) {
			v = cc
		}
	}
	return v
}

func (p *pool) removeLocked(cc *clientConn) {
	if p.m[cc.key] == cc {
		delete(p.m, cc.key)
	}
	cc.gone = true
}

func (p *pool) release(cc *clientConn, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cc.busy--
	cc.last = time.Now()
	if errors.Is(err, ErrServerGone) && !cc.gone {
		p.removeLocked(cc) // its watcher closes it
	}
}

// dial connects cc, on the adapter's context: a call that gives up does
// not abort the dial other calls of the session wait for.
func (p *pool) dial(cc *clientConn) {
	p.mu.Lock()
	ctx := p.ctx
	p.mu.Unlock()
	c, err := p.a.dial(ctx, p.a.newClient(clientOptions(p.a, cc.key), cc.key), false)
	p.mu.Lock()
	stale := false
	switch {
	case err != nil:
		cc.err = fmt.Errorf("%w: %v", ErrUnavailable, err)
		p.removeLocked(cc)
	case cc.gone || p.closed:
		// Ended, or the adapter stopped, while dialling: closed below,
		// outside the lock (and after closeAll's wait, on this goroutine).
		cc.conn, stale = c, true
	default:
		cc.conn = c
		p.wg.Go(func() { p.watch(cc) })
	}
	close(cc.ready)
	p.mu.Unlock()
	if stale {
		c.close()
	}
}

// watch removes a connection from the pool once it ends (the child died,
// or the server closed the session), so the next call dials afresh.
func (p *pool) watch(cc *clientConn) {
	cc.conn.sess.Wait()
	p.mu.Lock()
	p.removeLocked(cc)
	p.mu.Unlock()
	cc.close()
}

func (cc *clientConn) close() {
	if cc.conn != nil {
		cc.conn.close()
	}
}

// end closes a client session's upstream session: the client left.
func (p *pool) end(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cc := p.m[key]
	if cc == nil {
		return
	}
	p.removeLocked(cc)
	if cc.conn != nil {
		p.wg.Go(func() { cc.close() })
	}
	p.a.log.Info("closed the upstream session of an ended client session")
}

// reap closes the sessions idle since before now minus IdleTimeout.
func (p *pool) reap(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, cc := range p.m {
		if cc.busy == 0 && cc.conn != nil && now.Sub(cc.last) >= p.a.opts.IdleTimeout {
			p.removeLocked(cc)
			p.wg.Go(func() { cc.close() })
			n++
		}
	}
	return n
}

func (p *pool) closeAll() {
	p.mu.Lock()
	p.closed = true
	for _, cc := range p.m {
		p.removeLocked(cc)
		if cc.conn != nil {
			p.wg.Go(func() { cc.close() })
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// size is how many client sessions have an upstream session.
func (p *pool) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// pids are the process ids of the per-client children.
func (p *pool) pids() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, cc := range p.m {
		if cc.conn != nil && cc.conn.pid != 0 {
			out = append(out, cc.conn.pid)
		}
	}
	return out
}

// clientOptions are the MCP client options of a client session's own
// upstream session: what its server sends outside calls goes to that
// session alone.
func clientOptions(a *Adapter, key string) *mcp.ClientOptions {
	return &mcp.ClientOptions{
		// Sampling, elicitation and roots are the calls' clients' (serverrequests.go),
		// asked by the server or by its multi round-trip.
		Capabilities:                  adapterCapabilities(),
		ElicitationHandler:            elicitInput,
		CreateMessageWithToolsHandler: sampleInput,
		LoggingMessageHandler:         func(_ context.Context, r *mcp.LoggingMessageRequest) { a.sessionLog(key, r.Params) },
		ResourceUpdatedHandler:        func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { a.resourceUpdated(key, r.Params) },
		// A URL elicitation's completion goes to the client session that
		// was asked it, on either kind of connection (the worker knows it).
		ElicitationCompleteHandler: func(_ context.Context, r *mcp.ElicitationCompleteNotificationRequest) {
			if r.Params != nil {
				a.w.CompleteElicitation(r.Params.ElicitationID)
			}
		},
	}
}

// setLevel forwards the client's log level to its upstream session when
// it changed, so the server filters as it would for the client directly.
func (cc *clientConn) setLevel(ctx context.Context, level string) {
	if level == "" {
		return
	}
	// Decide under the lock, ask the server outside it: a slow server
	// holds up only the call that changed the level, not every call of
	// the session behind it.
	cc.levelMu.Lock()
	if level == cc.level || !cc.conn.hasLogging() {
		cc.levelMu.Unlock()
		return
	}
	cc.level = level
	cc.levelMu.Unlock()
	if err := cc.conn.sess.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: mcp.LoggingLevel(level)}); err != nil {
		cc.levelMu.Lock()
		if cc.level == level {
			cc.level = "" // not set: the next call tries again
		}
		cc.levelMu.Unlock()
	}
}

func (c *conn) hasLogging() bool {
	r := c.sess.InitializeResult()
	return r != nil && r.Capabilities != nil && r.Capabilities.Logging != nil
}

// sessionFor is the upstream session a call runs on: its client session's
// own in per-client mode, else the shared one. release ends the call's
// use of it, with the call's error.
func (a *Adapter) sessionFor(ctx context.Context, c *worker.Call) (*mcp.ClientSession, func(error), error) {
	if a.opts.Sessions == Shared || c.Session() == "" {
		s, err := a.session(ctx)
		return s, func(error) {}, err
	}
	cc, release, err := a.pool.get(ctx, c.Session())
	if err != nil {
		return nil, nil, err
	}
	cc.setLevel(ctx, c.LogLevel())
	return cc.conn.sess, release, nil
}

// UpstreamSessions is how many client sessions have an upstream session
// of their own (per-client mode).
func (a *Adapter) UpstreamSessions() int { return a.pool.size() }

// SessionPIDs are the process ids of the per-client children (stdio,
// per-client mode).
func (a *Adapter) SessionPIDs() []int { return a.pool.pids() }
