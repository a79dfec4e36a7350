package worker

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// Reasons the handler's context was cancelled.
var (
	errStopped    = errors.New("worker: call settled by the coordinator")
	errShutdown   = errors.New("worker: shutting down")
	errLeaseLost  = errors.New("worker: lease lost; call failed over")
	errCallerGone = errors.New("worker: caller gone")
)

// Execution states: a call's progress may go out only while running.
const (
	running  = iota
	settling // handler returned; the coordinator decides
	stopped  // settled without us
)

// execution is one call in flight on this worker.
type execution struct {
	w             *Worker
	ref           *pb.CallRef
	stream        pb.WorkerService_ExecuteServer
	cancel        context.CancelCauseFunc
	wantsProgress bool
	began         time.Time     // when the worker took the call
	children      childRequests // its requests toward the client (childrequests.go)
	task          bool          // runs an MCP task: outlives its stream (tasks.go)

	sendMu sync.Mutex // held across stream.Send, taken before mu

	mu         sync.Mutex
	state      int
	order      *pb.StopCall  // why the coordinator stopped the call
	ownOrder   bool          // order is the worker's own, after it lost its lease
	ordered    chan struct{} // closed once an order is set, or the worker shuts down (endAwaitLocked)
	last       float64       // last progress sent
	anySent    bool
	reported   reported              // last progress the handler reported (progress.go)
	outcome    string                // for metrics: completed, tool_error, failed, cancelled, lost
	cancelTime time.Time             // when the context was first cancelled
	stoppedAt  time.Time             // when the handler returned; zero while it runs
	goneBy     time.Time             // its caller left: the decision is awaited until then
	awaiting   bool                  // finish awaits the coordinator's order, and reports the stop
	park       func() (Parked, bool) // the handler's park hook (park.go)
	resumed    Parked                // the parked work this call resumes, until its handler takes it

	call *Call // set before the call is tracked
}

// Execute implements WorkerService.Execute.
func (w service) Execute(req *pb.ExecuteRequest, stream pb.WorkerService_ExecuteServer) error {
	run, args, err := w.admit(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(callParent(req, stream))
	defer cancel(nil)
	if d := req.GetDeadline(); d != nil {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadline(ctx, d.AsTime())
		defer cancelDeadline()
	}
	e := &execution{
		w:             w.Worker,
		ref:           &pb.CallRef{CallId: req.GetCallId(), Fence: req.GetFence(), Worker: w.opts.Name, Placement: req.GetPlacement()},
		stream:        stream,
		cancel:        cancel,
		wantsProgress: req.GetProgress(),
		task:          req.GetTask(),
		ordered:       make(chan struct{}),
		began:         time.Now(),
	}
	e.children.init(ctx, req)
	call := &Call{ID: req.GetCallId(), Method: methodOf(req), Tool: req.GetTool(), Arguments: args, Params: req.GetParamsJson(),
		Deadline: req.GetDeadline().AsTime(), exec: e, principal: req.GetPrincipal(), scopes: req.GetScopes(),
		session: req.GetSession(), logLevel: req.GetLogLevel()}
	e.call = call
	if err := w.track(e, req.GetDeadline()); err != nil {
		return err
	}
	defer w.untrack(e)
	if req.GetResume() != "" {
		// A 2026-07-28 retry resumes its parked call; a park that is gone
		// fails it, as the tool must not run anew (park.go).
		if e.resumed = w.resume(req); e.resumed == nil {
			run = parkGone
		}
		defer e.abandonUnclaimed()
	}
	// The call is this worker's now: the headers say so. A task outlives
	// the stream, and its gateway answers CreateTaskResult once it hears
	// them; any other call's gateway lets go of its request then (gRPC
	// keeps a sent request for a retry until it hears from the server).
	stream.SendHeader(nil)
	if req.GetDeadline() == nil {
		call.Deadline = time.Time{}
	}
	// The cancel-to-stop clock starts when the worker cancels the context
	// (a stop order, shutdown) or, for a caller gone or a deadline, when
	// the context reports it.
	cancelSeen := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		e.markCancelled()
		close(cancelSeen)
	})
	hctx, span := startHandlerSpan(ctx, req) // trace.go
	w.handlers.Add(1)
	res, herr := runHandler(hctx, run, call)
	stoppedAt := time.Now()
	w.handlers.Add(-1)
	endHandlerSpan(ctx, span, res.spanResult(), herr, stoppedAt)
	if !stopWatch() { // the context was cancelled; its callback has started
		<-cancelSeen
		w.metrics.stopped(e.cancelledAt(), stoppedAt)
	}
	err = e.finish(ctx, res, herr, stoppedAt)
	w.metrics.calls.WithLabelValues(metricTarget(call), e.outcome).Inc()
	return err
}

func (w *Worker) admit(req *pb.ExecuteRequest) (invoke, json.RawMessage, error) {
	if b, err := hex.DecodeString(req.GetCallId()); err != nil || len(b) != 16 {
		return nil, nil, status.Error(codes.InvalidArgument, "call id must be 32 hex digits")
	}
	if req.GetFence() < 0 || req.GetFence() == 0 && len(req.GetPlacement()) == 0 {
		return nil, nil, status.Error(codes.InvalidArgument, "fence must be positive, or 0 with a placement")
	}
	// A gateway that names the worker it was told to use must reach that
	// worker: another one, at a reused address, may not run the call.
	// An empty name is not checked, for gateways that do not send it.
	if name := req.GetWorker(); name != "" && name != w.opts.Name {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "this is worker %q, not %q", w.opts.Name, name)
	}
	args, err := callArguments(req)
	if err != nil {
		return nil, nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining {
		return nil, nil, status.Error(codes.Unavailable, "worker is draining")
	}
	run := w.invokerLocked(methodOf(req), req.GetTool())
	if run == nil {
		return nil, nil, status.Errorf(codes.NotFound, "this worker does not serve %s %q", methodOf(req), req.GetTool())
	}
	if w.opts.Capacity > 0 && len(w.calls) >= w.opts.Capacity {
		return nil, nil, status.Error(codes.ResourceExhausted, "worker at capacity")
	}
	return run, args, nil
}

func (w *Worker) track(e *execution, deadline *timestamppb.Timestamp) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.calls[e.ref.CallId]; dup {
		return status.Error(codes.AlreadyExists, "call already executing")
	}
	if e.task {
		var d time.Time
		if deadline != nil {
			d = deadline.AsTime()
		}
		if err := w.openTaskLocked(e.ref.CallId, d); err != nil { // taskruns.go
			return err
		}
	}
	w.calls[e.ref.CallId] = e
	w.running.Add(1)
	return nil
}

func (w *Worker) untrack(e *execution) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.calls[e.ref.CallId] == e {
		delete(w.calls, e.ref.CallId)
		w.running.Done()
	}
}

// stopCall applies a coordinator's stop order.
func (w *Worker) stopCall(o *pb.StopCall) {
	w.mu.Lock()
	e := w.calls[o.GetCallId()]
	w.mu.Unlock()
	if e == nil {
		// Not running here (finished, or never arrived): still tell the
		// coordinator so the order is cleared.
		w.ctrl.reportStopped(o.GetCallId(), time.Now())
		return
	}
	if at := e.stopBy(o, errStopped); !at.IsZero() {
		// The handler has returned and the call is being settled; the
		// order says someone else decided it. The settle reports the stop
		// when it gets through, but it may not (it gives up after
		// settleTimeout), and then nothing would clear the order: say now
		// that the handler stopped. A second report is harmless.
		w.ctrl.reportStopped(o.GetCallId(), at)
	}
}

// abandonAll cancels every call after the worker lost its lease: the
// coordinator has failed them already.
func (w *Worker) abandonAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.calls {
		e.stopBy(&pb.StopCall{CallId: e.ref.CallId, State: pb.CallState_CALL_STATE_FAILED, Reason: "worker lease lost"}, errLeaseLost)
	}
}

// stopBy stops the call for o and returns when its handler returned, or
// zero if it still runs or finish awaits this order.
func (e *execution) stopBy(o *pb.StopCall, cause error) time.Time {
	e.markCancelled()
	e.mu.Lock()
	if e.state == running {
		e.state = stopped
	}
	if e.order == nil {
		e.order, e.ownOrder = o, errors.Is(cause, errLeaseLost)
		e.endAwaitLocked()
	}
	at := e.stoppedAt
	if e.awaiting {
		at = time.Time{} // finish ends the call as ordered, and says it stopped
	}
	e.mu.Unlock()
	e.cancel(cause)
	return at
}

func (e *execution) shutdown() {
	e.markCancelled()
	e.mu.Lock()
	e.endAwaitLocked() // no decision is waited for past the drain
	e.mu.Unlock()
	e.cancel(errShutdown)
}

// endAwaitLocked ends finish's wait for the coordinator's order
// (awaitOrder), once: an order came (the coordinator's, or the worker's
// own when it lost its lease), or the worker is shutting down. awaitOrder
// then takes the coordinator's order if there is one; else finish
// settles the call itself.
func (e *execution) endAwaitLocked() {
	select {
	case <-e.ordered: // ended already
	default:
		close(e.ordered)
	}
}

// markCancelled notes when the call's context was first cancelled.
func (e *execution) markCancelled() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancelTime.IsZero() {
		e.cancelTime = time.Now()
	}
}

func (e *execution) cancelledAt() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cancelTime
}

func runHandler(ctx context.Context, run invoke, c *Call) (a *answer, err error) {
	defer func() {
		if p := recover(); p != nil {
			a, err = nil, fmt.Errorf("%s panicked: %v\n%s", c.describe(), p, debug.Stack())
		}
	}()
	a, err = run(ctx, c)
	if err == nil && a == nil {
		err = fmt.Errorf("%s returned no result", c.describe())
	}
	return a, err
}

func (e *execution) progress(p, total float64, msg string) {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	e.mu.Lock()
	noted := e.noteLocked(p, total, msg)
	ok := e.state == running && e.wantsProgress && (!e.anySent || p > e.last)
	if ok {
		e.last, e.anySent = p, true
	}
	e.mu.Unlock()
	if noted {
		e.w.ctrl.progressChanged()
	}
	if ok {
		e.stream.Send(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Progress{Progress: &pb.Progress{Progress: p, Total: total, Message: msg}}})
	}
}

func (e *execution) log(level, logger string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		return
	}
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	e.mu.Lock()
	ok := e.state == running
	e.mu.Unlock()
	if ok {
		e.stream.Send(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Log{Log: &pb.LogMessage{Level: level, Logger: logger, DataJson: b}}})
	}
}
