package gateway

// A call begun beside its work (DESIGN section 4): Start names the worker
// at once, Execute goes out while the call's record is written, and
// nothing of the call reaches its client before the record is durable.
// The hold keeps progress, logs and requests toward the client until
// Start says the record is written or the call's decision (durable
// itself) comes; a cancel asked for meanwhile waits in the gate, as it
// waits for Begin.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/jsonrpc"
)

// beginFirstFor is how long a gateway places calls Begin-first after its
// Start failed for want of a coordinator (a link failing, or a coordinator
// of a release without Start): work starts only once it is recorded. A
// Begin answered meanwhile ends it, unless Start was unknown.
const beginFirstFor = 10 * time.Second

// maxHeld bounds the progress notifications and logs a call holds while
// its record is written (a commit, milliseconds); past it they are
// dropped. Requests toward the client are always held: the handler waits
// for their answers, which bounds them.
const maxHeld = 256

// starter says whether calls may start beside their Begin now.
type starter struct {
	beginFirstUntil atomic.Int64 // unix nanoseconds
	unknown         atomic.Bool  // a coordinator did not know Start
}

func (s *starter) beside() bool { return time.Now().UnixNano() >= s.beginFirstUntil.Load() }

// failed notes a Start that could not reach a coordinator that serves it.
func (s *starter) failed(err error) {
	switch status.Code(err) {
	case codes.Unimplemented:
		s.unknown.Store(true)
		fallthrough
	case codes.Unavailable, codes.DeadlineExceeded:
		s.beginFirstUntil.Store(time.Now().Add(beginFirstFor).UnixNano())
	}
}

// answered notes a Begin answered while calls are placed Begin-first:
// the link works again, so calls start beside their Begin again, unless
// a coordinator did not know Start (an older release, until its time is
// up).
func (s *starter) answered() {
	if !s.unknown.Load() {
		s.beginFirstUntil.Store(0)
	}
}

// started is the rest of a Start stream once the call is placed: its
// Begun message, or the error that ends it.
type started struct {
	stream  grpc.ServerStreamingClient[pb.StartResponse]
	cancel  context.CancelFunc
	beginID string
}

// begin places the call. Beside the work (Start) it returns with the
// placement at once, and started yields the Begin's end; Begin-first
// (Begin, or a Start that recorded the call first) started is nil.
// Its context ends with the answer, so that nothing of it stays with a
// call that runs for long.
func (c *call) begin(p *routed, beginID string) (*pb.BeginResponse, *started, error) {
	g := c.s.g
	req := &pb.BeginRequest{
		Key: &pb.CallKey{Scope: c.s.scope, RequestId: requestID(c.id)}, Tool: p.target, Method: p.beginMethod(),
		Principal: c.s.principal, Gateway: g.opts.Name, Timeout: durationpb.New(g.opts.CallTimeout),
		BeginId: beginID, PinWorker: c.children.roundTrip.pin,
	}
	ctx, cancel := context.WithTimeout(c.traced(g.base), g.opts.CallTimeout)
	if !g.starts.beside() {
		defer cancel()
		begun, err := g.coord.Begin(ctx, req)
		if err == nil {
			g.starts.answered()
		}
		return begun, nil, err
	}
	stream, err := g.coord.Start(ctx, &pb.StartRequest{Begin: req})
	var msg *pb.StartResponse
	if err == nil {
		msg, err = stream.Recv()
	}
	if err != nil {
		cancel()
		g.starts.failed(err)
		if status.Code(err) == codes.Unimplemented {
			// Compat(v0.2): v0.1 coordinators have no Start; drop in v0.3.
			return c.begin(p, beginID)
		}
		return nil, nil, err
	}
	placed := msg.GetPlaced()
	if placed.GetFence() != 0 {
		cancel()
		return placed, nil, nil // recorded first: a worker or tool that needs it
	}
	return placed, &started{stream: stream, cancel: cancel, beginID: beginID}, nil
}

// awaitRecord waits for the record of a call begun beside its work, then
// lets out what the hold kept and sends a cancel asked for meanwhile. If
// Start ends without saying the record is written (its reply lost with a
// half-dead link, say), the gateway reads the record: found, it is
// durable; not found, the call is decided by its placement: failed,
// creating its record if need be, unless a decision already stands.
func (c *call) awaitRecord(st *started, begun *pb.BeginResponse) {
	defer st.cancel()
	msg, err := st.stream.Recv()
	if err == nil && msg.GetBegun() != nil {
		if fence := msg.GetBegun().GetFence(); fence > 0 {
			c.mu.Lock()
			c.fence, c.placement = fence, nil
			c.mu.Unlock()
		}
		c.recorded()
		return
	}
	if err == nil {
		err = status.Error(codes.Internal, "Start sent something other than Begun")
	}
	if client.Kind(err) == client.ErrUnknownCall {
		// Its worker left before the record was written (Begin-first, the
		// coordinator would have picked another). The call is lost with
		// its worker: execute fails it so (lost, which creates its record
		// failed), and run places it again if it may (retry). The hold
		// stays shut, and what it kept is dropped (reopen): nothing of
		// this placement is shown. Cutting the Execute stream also stops
		// the handler, should the worker still run it.
		c.s.g.log.Info("a call's worker left before its record was written", "scope", c.s.scope, "call", begun.GetCallId(), "worker", begun.GetWorker())
		c.cutExecute()
		return
	}
	c.s.g.starts.failed(err)
	if c.hasRecord(begun.GetCallId()) {
		c.recorded()
		return
	}
	c.s.g.log.Warn("a call's record could not be confirmed; failing it", "scope", c.s.scope, "call", begun.GetCallId(), "err", err)
	// Its outcome goes to the client before anything the worker sends
	// about it: the Execute stream's end waits for the hold.
	c.hold.during(func() { c.failUnrecorded(begun, st.beginID, err) })
	c.recorded() // what it held goes out if a decision stands, else nowhere
}

// hasRecord says whether the call's record is known to be durable: a
// read finds it. A read that finds nothing, or fails, says nothing: a
// Begin may still be on its way, which the placement's decision settles.
func (c *call) hasRecord(callID string) bool {
	g := c.s.g
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.traced(g.base)), cancelTimeout)
	defer cancel()
	_, err := g.coord.GetCall(ctx, &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: callID}})
	return err == nil
}

// failUnrecorded fails a call whose Start ended without saying its record
// is written, by its placement (creating the record if need be), and
// answers the client as the decision says.
func (c *call) failUnrecorded(begun *pb.BeginResponse, beginID string, cause error) {
	g := c.s.g
	resp, err := c.fail(begun, pb.Initiator_INITIATOR_DISCONNECT, "the gateway could not confirm the call's record: "+status.Convert(cause).Message())
	switch {
	case err != nil:
		// Undecided (its request id in use by another call, say, or the
		// coordinator it asked stopping): abandoning its Begin keeps any
		// later decision by placement (its worker's) from recording it,
		// and fails a record that was written meanwhile, unless a
		// decision stands there already (its worker's completion,
		// through another coordinator), which the client then gets.
		g.log.Warn("cannot record a call whose Begin failed; abandoning it", "call", begun.GetCallId(), "err", err)
		switch r := c.abandonBegin(beginID); r.GetResult() {
		case pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED:
			c.cancelledBy(r.GetWinnerInitiator(), r.GetWinnerReason())
		case pb.SettleResult_SETTLE_RESULT_ALREADY_COMPLETED, pb.SettleResult_SETTLE_RESULT_ALREADY_FAILED:
			// its answer is on the stream
		default: // failed by the abandonment, never recorded, or no coordinator answered
			c.stopped(c.notStarted(cause))
		}
	case resp.GetResult() == pb.SettleResult_SETTLE_RESULT_WON:
		c.stopped(c.notStarted(cause))
	case resp.GetResult() == pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED:
		c.cancelledBy(resp.GetWinnerInitiator(), resp.GetWinnerReason())
	} // completed or failed already: its answer is on the stream
}

// recorded lets the call be shown: its record is durable.
func (c *call) recorded() {
	c.hold.release()
	if pending := c.gate.begin(); pending != nil {
		c.sendCancel(pending)
	}
}

// notStarted is the answer of a call that could not be started, as
// beginFailed gives it.
func (c *call) notStarted(err error) []byte {
	return jsonrpc.ErrorResponse(c.id, true, jsonrpc.Errorf(jsonrpc.CodeInternalError, "the call could not be started: %s", status.Convert(err).Message()))
}

// stopped answers a call that failed before its record was durable and
// stops its Execute stream; nothing it held goes out.
func (c *call) stopped(msg []byte) {
	c.setOutcome(outcomeFailed)
	c.respond(msg)
	c.cutExecute()
}

// cutExecute ends the call's Execute stream, if one is open: its worker
// sees its caller go.
func (c *call) cutExecute() {
	c.mu.Lock()
	stop := c.stopExec
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// fail asks the coordinator to fail the call, by its fence or placement.
func (c *call) fail(begun *pb.BeginResponse, who pb.Initiator, reason string) (*pb.FailResponse, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.traced(c.s.g.base)), cancelTimeout)
	defer cancel()
	return c.s.g.coord.Fail(ctx, &pb.FailRequest{Call: c.ref(begun), Initiator: who, Reason: reason})
}

// ref names the call begun to the coordinator: by its fence, or by its
// placement while the fence is not known.
func (c *call) ref(begun *pb.BeginResponse) *pb.CallRef {
	r := &pb.CallRef{CallId: begun.GetCallId(), Fence: begun.GetFence(), Worker: begun.GetWorker()}
	if r.Fence == 0 {
		c.mu.Lock()
		if c.begun == nil || c.begun.GetCallId() == r.CallId {
			r.Fence, r.Placement = c.fence, c.placement
		}
		c.mu.Unlock()
	}
	return r
}

// hold keeps what a call would show its client until its record is
// durable. A zero hold runs everything at once; one that was shut keeps
// it until release, which runs what it kept, in order, and opens it.
type hold struct {
	flush sync.Mutex // held by release while it runs what was kept

	mu      sync.Mutex
	shut    bool
	kept    []func()
	dropped int // progress and logs past maxHeld
}

// reopen drops what the hold kept, if anything, and opens it for the
// call's next placement (a retry, begun first): what it kept came of a
// placement whose record was never written (its worker left first), and
// nothing of that may be shown.
func (h *hold) reopen() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shut, h.kept = false, nil
}

// shutUntilRelease makes the hold keep until release: a call begun beside
// its work.
func (h *hold) shutUntilRelease() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shut = true
}

// run runs f now if the hold is open, else keeps it; droppable says f may
// be dropped once maxHeld are kept (progress, logs).
func (h *hold) run(f func(), droppable bool) {
	h.mu.Lock()
	if !h.shut {
		h.mu.Unlock()
		f()
		return
	}
	if droppable && len(h.kept) >= maxHeld {
		h.dropped++
		h.mu.Unlock()
		return
	}
	h.kept = append(h.kept, f)
	h.mu.Unlock()
}

// during runs f while nothing kept goes out and release waits: a decision
// taken in f reaches the client before anything the hold kept or holds up.
func (h *hold) during(f func()) {
	h.flush.Lock()
	defer h.flush.Unlock()
	f()
}

// release runs what was kept, in order, and opens the hold. Concurrent
// releases run it once; what run keeps meanwhile goes after it.
func (h *hold) release() {
	h.flush.Lock()
	defer h.flush.Unlock()
	for {
		h.mu.Lock()
		kept := h.kept
		h.kept = nil
		if len(kept) == 0 {
			h.shut = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		for _, f := range kept {
			f()
		}
	}
}
