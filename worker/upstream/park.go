package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpcancel/mcpcancel/worker"
)

// A fronted tool runs once per call. When its server asks the call's
// client something and the client speaks 2026-07-28, the gateway answers
// the call input_required and parks it (worker.Call.OnPark): the server's
// tools/call, and its request toward the client, stay where they are,
// detached from the call, until the client's retry resumes them on this
// worker (worker.Call.Resumed); the retry's answers go to the waiting
// request, and the server's result becomes the retry's. A park not
// resumed in time is abandoned: the tools/call is cancelled at the
// server (notifications/cancelled), once. While a call owns the run, its
// end cancels the tools/call as before.
//
// So the upstream tools/call is a run of its own, on a goroutine the
// adapter owns, that outlives the call that started it only while
// parked. The server's requests toward the client are the run's: each
// is asked of whichever call owns the run, under a key that stays the
// same across rounds, so that the retry's inputResponses answer it.
// Progress the server sends after a resumption is not relayed: its
// route closed with the first call.

// errRunEnded is what a server's request hears when its run ended while
// it waited for a call to own it.
var errRunEnded = errors.New("the call ended while its question waited for the client's retry")

// run is one upstream tools/call.
type run struct {
	ctx    context.Context // the upstream request's
	cancel context.CancelCauseFunc
	keys   atomic.Int64 // numbers the server's requests toward the client

	done chan struct{} // closed once res and err are set
	res  *worker.Result
	err  error

	mu       sync.Mutex
	owner    *worker.Call // nil while parked, and once ended
	ownerCtx context.Context
	unhook   func() bool   // stops the owner's end cancelling the run
	parked   chan struct{} // closed when the owner's call is parked
	attached chan struct{} // closed and replaced when a call takes the run
	ended    bool
}

type runKey struct{}

// newRun starts owned by call c, whose context is ctx; the run's context
// keeps ctx's values, not its end.
func newRun(ctx context.Context, c *worker.Call) *run {
	r := &run{done: make(chan struct{}), attached: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	r.ctx = context.WithValue(r.ctx, runKey{}, r)
	r.mu.Lock()
	r.attachLocked(ctx, c)
	r.mu.Unlock()
	return r
}

// attachLocked makes c, whose context is ctx, the run's owner.
func (r *run) attachLocked(ctx context.Context, c *worker.Call) {
	r.owner, r.ownerCtx, r.parked = c, ctx, make(chan struct{})
	r.unhook = context.AfterFunc(ctx, func() { r.cancel(context.Cause(ctx)) })
	c.OnPark(r.park)
	close(r.attached)
	r.attached = make(chan struct{})
}

// park detaches the run from its owner: the worker parks the owner's
// call.
func (r *run) park() (worker.Parked, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.owner == nil || r.ended || !r.unhook() {
		return nil, false // ended, or the owner's end is cancelling it
	}
	r.owner, r.ownerCtx = nil, nil
	close(r.parked)
	return r, true
}

// isParked says whether the run waits, parked, for a call to resume it.
func (r *run) isParked() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.owner == nil && !r.ended
}

// Abandon implements worker.Parked: no retry resumed the run in time.
func (r *run) Abandon(cause error) {
	r.mu.Lock()
	owned := r.owner != nil
	r.mu.Unlock()
	if !owned {
		r.cancel(cause)
	}
}

// resume makes c, whose context is ctx, the owner of the parked run, and
// waits for it as start's caller did.
func (r *run) resume(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	r.mu.Lock()
	if r.ended || r.owner != nil || r.ctx.Err() != nil {
		r.mu.Unlock()
		return nil, worker.ErrParkGone
	}
	r.attachLocked(ctx, c)
	r.mu.Unlock()
	return r.await(ctx)
}

// finish records the run's outcome.
func (r *run) finish(res *worker.Result, err error) {
	r.mu.Lock()
	r.res, r.err, r.ended = res, err, true
	if r.unhook != nil {
		r.unhook()
	}
	r.mu.Unlock()
	r.cancel(nil)
	close(r.done)
}

// await waits for the run's outcome on behalf of its owner, whose context
// is ctx. When the owner's call is parked it returns once the call ends,
// with nothing: the call's outcome is the gateway's (input_required).
func (r *run) await(ctx context.Context) (*worker.Result, error) {
	r.mu.Lock()
	parked := r.parked
	r.mu.Unlock()
	select {
	case <-r.done:
		return r.res, r.err
	case <-parked:
		<-ctx.Done()
		return nil, ctx.Err()
	case <-ctx.Done():
	}
	select { // the owner's end cancelled the run, unless parked just then
	case <-r.done:
		return r.res, r.err
	case <-parked:
		return nil, ctx.Err()
	}
}

// current is the run's owner, waiting while the run is parked.
func (r *run) current(ctx context.Context) (*worker.Call, context.Context, error) {
	for {
		r.mu.Lock()
		c, cctx, att, ended := r.owner, r.ownerCtx, r.attached, r.ended
		r.mu.Unlock()
		switch {
		case c != nil:
			return c, cctx, nil
		case ended:
			return nil, nil, errRunEnded
		}
		select {
		case <-att:
		case <-r.ctx.Done():
			return nil, nil, errRunEnded
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// ask relays one of the server's requests to the client of the call that
// owns the run, and of the calls that resume it after a park, until one
// answers. Its key stays the same across rounds.
func (r *run) ask(ctx context.Context, method string, req mcp.Request) (json.RawMessage, error) {
	params, err := json.Marshal(wireParams(req))
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	kctx := worker.WithInputKey(ctx, "input-"+strconv.FormatInt(r.keys.Add(1), 10))
	for {
		c, cctx, err := r.current(ctx)
		if err != nil {
			return nil, &jsonrpc.Error{Code: codeNoCall, Message: err.Error()}
		}
		raw, err := requestOf(kctx, c, cctx, method, params)
		if !errors.Is(err, worker.ErrParked) {
			return raw, answerError(err)
		}
	}
}

// runOf is the run whose upstream request ctx serves, if any.
func runOf(ctx context.Context) *run {
	r, _ := ctx.Value(runKey{}).(*run)
	return r
}

// handle runs one call on the server: a run of its own, which the call
// owns, or the parked run the call resumes.
func (a *Adapter) handle(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	if p := c.Resumed(); p != nil {
		r, ok := p.(*run)
		if !ok {
			p.Abandon(worker.ErrParkGone)
			return nil, worker.ErrParkGone
		}
		return r.resume(ctx, c)
	}
	r := newRun(ctx, c)
	if !a.runs.start(r, func() { r.finish(a.runTool(r.ctx, c)) }) {
		r.finish(nil, worker.Unavailable(errAdapterStopped))
	}
	return r.await(ctx)
}

// errAdapterStopped ends the runs of an adapter whose Run returned.
var errAdapterStopped = errors.New("upstream: the adapter stopped")

// runs are the adapter's upstream runs; Run ends them and waits.
type runs struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	live   map[*run]struct{} // guarded by mu
	closed bool              // guarded by mu
}

// start runs r's f on a goroutine the adapter owns, unless it is closed.
func (rs *runs) start(r *run, f func()) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		return false
	}
	if rs.live == nil {
		rs.live = map[*run]struct{}{}
	}
	rs.live[r] = struct{}{}
	rs.wg.Go(func() {
		defer func() {
			rs.mu.Lock()
			delete(rs.live, r)
			rs.mu.Unlock()
		}()
		f()
	})
	return true
}

// close ends the runs and waits for them.
func (rs *runs) close() {
	rs.end()
	rs.wg.Wait()
}

// end refuses further runs and ends those running.
func (rs *runs) end() {
	rs.mu.Lock()
	rs.closed = true
	live := make([]*run, 0, len(rs.live))
	for r := range rs.live {
		live = append(live, r)
	}
	rs.mu.Unlock()
	for _, r := range live {
		r.cancel(errAdapterStopped)
	}
}
