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
	task          bool // runs an MCP task: outlives its stream (tasks.go)

	sendMu sync.Mutex // held across stream.Send, taken before mu

	mu         sync.Mutex
	state      int
	order      *pb.StopCall // why the coordinator stopped the call
	last       float64      // last progress sent
	anySent    bool
	outcome    string    // for metrics: completed, tool_error, failed, cancelled, lost
	cancelTime time.Time // when the context was first cancelled
}

// Execute implements WorkerService.Execute.
func (w *Worker) Execute(req *pb.ExecuteRequest, stream pb.WorkerService_ExecuteServer) error {
	reg, args, err := w.admit(req)
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
		w:             w,
		ref:           &pb.CallRef{CallId: req.GetCallId(), Fence: req.GetFence(), Worker: w.opts.Name},
		stream:        stream,
		cancel:        cancel,
		wantsProgress: req.GetProgress(),
		task:          req.GetTask(),
	}
	if err := w.track(e); err != nil {
		return err
	}
	defer w.untrack(e)
	call := &Call{ID: req.GetCallId(), Tool: req.GetTool(), Arguments: args, Deadline: req.GetDeadline().AsTime(), exec: e,
		principal: req.GetPrincipal(), scopes: req.GetScopes()}
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
	res, herr := runHandler(ctx, reg.handler, call)
	stoppedAt := time.Now()
	if !stopWatch() { // the context was cancelled; its callback has started
		<-cancelSeen
		w.metrics.stopped(e.cancelledAt(), stoppedAt)
	}
	err = e.finish(ctx, res, herr, stoppedAt)
	w.metrics.calls.WithLabelValues(req.GetTool(), e.outcome).Inc()
	return err
}

func (w *Worker) admit(req *pb.ExecuteRequest) (*registered, json.RawMessage, error) {
	if b, err := hex.DecodeString(req.GetCallId()); err != nil || len(b) != 16 {
		return nil, nil, status.Error(codes.InvalidArgument, "call id must be 32 hex digits")
	}
	if req.GetFence() <= 0 {
		return nil, nil, status.Error(codes.InvalidArgument, "fence must be positive")
	}
	// A gateway that names the worker it was told to use must reach that
	// worker: another one, at a reused address, may not run the call.
	// An empty name is not checked, for gateways that do not send it.
	if name := req.GetWorker(); name != "" && name != w.opts.Name {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "this is worker %q, not %q", w.opts.Name, name)
	}
	args := json.RawMessage(req.GetArgumentsJson())
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
		return nil, nil, status.Error(codes.InvalidArgument, "arguments must be a JSON object")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.draining {
		return nil, nil, status.Error(codes.Unavailable, "worker is draining")
	}
	reg := w.tools[req.GetTool()]
	if reg == nil {
		return nil, nil, status.Errorf(codes.NotFound, "this worker has no tool %q", req.GetTool())
	}
	if w.opts.Capacity > 0 && len(w.calls) >= w.opts.Capacity {
		return nil, nil, status.Error(codes.ResourceExhausted, "worker at capacity")
	}
	return reg, args, nil
}

func (w *Worker) track(e *execution) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.calls[e.ref.CallId]; dup {
		return status.Error(codes.AlreadyExists, "call already executing")
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
	e.stopBy(o, errStopped)
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

func (e *execution) stopBy(o *pb.StopCall, cause error) {
	e.markCancelled()
	e.mu.Lock()
	if e.state == running {
		e.state = stopped
	}
	if e.order == nil {
		e.order = o
	}
	e.mu.Unlock()
	e.cancel(cause)
}

func (e *execution) shutdown() {
	e.markCancelled()
	e.cancel(errShutdown)
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

func runHandler(ctx context.Context, h Handler, c *Call) (res *Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("tool %s panicked: %v\n%s", c.Tool, p, debug.Stack())
		}
	}()
	res, err = h(ctx, c)
	if err == nil && res == nil {
		err = fmt.Errorf("tool %s returned no result", c.Tool)
	}
	return res, err
}

func (e *execution) progress(p, total float64, msg string) {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	e.mu.Lock()
	ok := e.state == running && e.wantsProgress && (!e.anySent || p > e.last)
	if ok {
		e.last, e.anySent = p, true
	}
	e.mu.Unlock()
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

// finish settles the call with the coordinator and sends the one final
// event the outcome allows.
func (e *execution) finish(ctx context.Context, res *Result, herr error, stoppedAt time.Time) error {
	e.mu.Lock()
	if e.state == running {
		e.state = settling
	}
	order := e.order
	e.mu.Unlock()
	cause := context.Cause(ctx)
	switch {
	case order != nil && errors.Is(cause, errLeaseLost):
		// Our own order, not the coordinator's: the call may belong to the
		// new lease (begun while the worker re-attached), so nobody else
		// will settle it. Fail it through the coordinator; the CAS says
		// whether the janitor already did.
		return e.failAs(pb.Initiator_INITIATOR_WORKER_LOST, errors.New(order.GetReason()), stoppedAt)
	case order != nil:
		e.outcome = "cancelled"
		e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
		return e.sendEnd(order.GetState(), order.GetInitiator(), order.GetReason())
	case e.stream.Context().Err() != nil && !e.task:
		return e.abandon(pb.Initiator_INITIATOR_DISCONNECT, "caller gone", stoppedAt)
	case errors.Is(cause, errShutdown):
		return e.abandon(pb.Initiator_INITIATOR_SHUTDOWN, "worker shutting down", stoppedAt)
	case errors.Is(cause, context.DeadlineExceeded):
		return e.abandon(pb.Initiator_INITIATOR_TIMEOUT, "deadline exceeded", stoppedAt)
	case herr != nil:
		return e.fail(herr, stoppedAt)
	default:
		return e.complete(res, stoppedAt)
	}
}

func (e *execution) complete(res *Result, stoppedAt time.Time) error {
	body, err := json.Marshal(res)
	if err != nil {
		return e.fail(fmt.Errorf("result does not encode: %w", err), stoppedAt)
	}
	var r *pb.CompleteResponse
	err = e.w.settle(e.stream.Context(), func(ctx context.Context) (err error) {
		r, err = e.w.coord.Complete(ctx, &pb.CompleteRequest{Call: e.ref, StoppedAt: timestamppb.New(stoppedAt), ToolError: res.IsError, TaskResultJson: e.taskResult(body)})
		return err
	})
	if err != nil {
		return err
	}
	// Only this worker completes its call: a completion found already
	// made is this one, retried after its reply was lost.
	if res := r.GetResult(); res != pb.SettleResult_SETTLE_RESULT_WON && res != pb.SettleResult_SETTLE_RESULT_ALREADY_COMPLETED {
		e.outcome = "lost"
		e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
		return e.sendEnd(settledState(res), r.GetWinnerInitiator(), r.GetWinnerReason())
	}
	e.outcome = "completed"
	if res.IsError {
		e.outcome = "tool_error"
	}
	return e.send(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Result{Result: &pb.ExecuteResult{ResultJson: body}}})
}

func (e *execution) fail(herr error, stoppedAt time.Time) error {
	if errors.Is(herr, ErrUnavailable) {
		return e.failAs(pb.Initiator_INITIATOR_WORKER_LOST, herr, stoppedAt)
	}
	return e.failAs(pb.Initiator_INITIATOR_TOOL, herr, stoppedAt)
}

// failAs settles the call FAILED for who, unless it was settled already.
func (e *execution) failAs(who pb.Initiator, herr error, stoppedAt time.Time) error {
	var r *pb.FailResponse
	err := e.w.settle(e.stream.Context(), func(ctx context.Context) (err error) {
		r, err = e.w.coord.Fail(ctx, &pb.FailRequest{Call: e.ref, Initiator: who, Reason: herr.Error(), StoppedAt: timestamppb.New(stoppedAt)})
		return err
	})
	if err != nil {
		return err
	}
	if r.GetResult() != pb.SettleResult_SETTLE_RESULT_WON {
		e.outcome = "lost"
		e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
		return e.sendEnd(settledState(r.GetResult()), r.GetWinnerInitiator(), r.GetWinnerReason())
	}
	e.outcome = "failed"
	return e.sendEnd(pb.CallState_CALL_STATE_FAILED, who, herr.Error())
}

// abandon cancels a call the worker stopped on its own account: its caller
// went away, its deadline passed or the worker is shutting down.
func (e *execution) abandon(who pb.Initiator, reason string, stoppedAt time.Time) error {
	e.outcome = "cancelled"
	var r *pb.CancelResponse
	err := e.w.settle(e.stream.Context(), func(ctx context.Context) (err error) {
		r, err = e.w.coord.Cancel(ctx, &pb.CancelRequest{
			Target: &pb.CancelRequest_Call{Call: e.ref}, Initiator: who, Reason: reason, StoppedAt: timestamppb.New(stoppedAt),
		})
		return err
	})
	if err != nil {
		return err
	}
	state := pb.CallState_CALL_STATE_CANCELLED
	switch r.GetResult() {
	case pb.CancelResult_CANCEL_RESULT_CANCELLED:
	case pb.CancelResult_CANCEL_RESULT_ALREADY_FAILED:
		state, who, reason = pb.CallState_CALL_STATE_FAILED, r.GetWinnerInitiator(), r.GetWinnerReason()
		e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
	case pb.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED:
		if r.GetWinnerInitiator() != pb.Initiator_INITIATOR_UNSPECIFIED {
			who, reason = r.GetWinnerInitiator(), r.GetWinnerReason()
		}
		e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
	default:
		e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
	}
	return e.sendEnd(state, who, reason)
}

func settledState(r pb.SettleResult) pb.CallState {
	switch r {
	case pb.SettleResult_SETTLE_RESULT_ALREADY_FAILED:
		return pb.CallState_CALL_STATE_FAILED
	case pb.SettleResult_SETTLE_RESULT_ALREADY_COMPLETED:
		return pb.CallState_CALL_STATE_COMPLETED
	default:
		return pb.CallState_CALL_STATE_CANCELLED
	}
}

// sendEnd ends the stream without a result.
func (e *execution) sendEnd(state pb.CallState, who pb.Initiator, reason string) error {
	if state == pb.CallState_CALL_STATE_FAILED {
		return e.send(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Failed{Failed: &pb.Failed{Reason: reason, Initiator: who}}})
	}
	return e.send(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Cancelled{Cancelled: &pb.Cancelled{Reason: reason, Initiator: who}}})
}

func (e *execution) send(m *pb.ExecuteResponse) error {
	if e.stream.Context().Err() != nil {
		return nil // the caller is gone; nobody to tell
	}
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	return e.stream.Send(m)
}

// settle calls the coordinator, retrying while it is unreachable. It keeps
// going after the caller is gone: the decision must still be recorded.
func (w *Worker) settle(ctx context.Context, rpc func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	wait := 20 * time.Millisecond
	for {
		// Each attempt has its own deadline: a reply lost on the way back
		// must not hold the call until settleTimeout, when a retry would be
		// recognised as the decision that already won.
		actx, acancel := context.WithTimeout(ctx, settleAttemptTimeout)
		err := rpc(actx)
		acancel()
		if err == nil {
			return nil
		}
		if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
			w.log.Error("settling call", "err", err)
			return status.Errorf(codes.Internal, "could not settle the call: %v", status.Convert(err).Message())
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return status.Error(codes.Unavailable, "coordinator unreachable; the call's outcome is undecided")
		}
		wait = min(2*wait, time.Second)
	}
}

// settleTimeout bounds how long a worker keeps trying to reach a
// coordinator to settle one call.
const settleTimeout = 30 * time.Second

// settleAttemptTimeout bounds one attempt: a commit takes milliseconds,
// so an attempt past this has lost its reply or its replica.
const settleAttemptTimeout = 2 * time.Second
