package worker

// Settling and finishing a call, apart from running it (execute.go): once
// the handler returns, finish asks the coordinator to record the outcome
// (Complete, Fail or Cancel, retried through lost replies and redials)
// and sends the one final event the decision allows.

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/backoff"
)

// ReasonCallerGone is the reason of the cancellation a worker records
// when its gateway's Execute stream ends before the handler returned:
// initiated as DISCONNECT, but by the worker, not by the client's leaving
// (the link between gateway and worker may have broken while the client
// still waits; the gateway then answers it with an error).
const ReasonCallerGone = "caller gone"

// finish settles the call with the coordinator and sends the one final
// event the outcome allows.
func (e *execution) finish(ctx context.Context, res *answer, herr error, stoppedAt time.Time) error {
	e.mu.Lock()
	if e.state == running {
		e.state = settling
	}
	e.stoppedAt = stoppedAt
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
		return e.endAsOrdered(order, stoppedAt)
	case errors.Is(cause, errCallerGone) || e.stream.Context().Err() != nil && !e.task:
		if order := e.awaitOrder(); order != nil {
			return e.endAsOrdered(order, stoppedAt)
		}
		return e.abandon(pb.Initiator_INITIATOR_DISCONNECT, ReasonCallerGone, stoppedAt)
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

// callerGoneWait is how long a worker whose caller went waits for the
// coordinator's stop order before it cancels the call itself. A gateway
// closes the Execute stream the moment its cancel wins (the fast path to
// the handler), and the stop order, the same decision, follows one watch
// delivery behind: without the wait, about one cancelled call in ten
// asked to cancel a call already cancelled, an RPC and a Txn for nothing.
// A caller that is truly gone (its gateway died, the link broke) is
// cancelled this much later; its handler has stopped already.
const callerGoneWait = 200 * time.Millisecond

// awaitOrder waits up to callerGoneWait for the coordinator's stop order,
// or until the time its gateway gave in CallersGone (callersgone.go),
// but no more than callerGoneWait once the Execute stream has ended: the
// gateway that said its cancellation was on the way has then either
// learnt the decision (whose stop order, if it has one, follows within a
// watch delivery) or given up on it, or is gone. A decision that writes
// no stop order (one that created the call's record: the gateway failed
// it by its placement when its Start was cut off), or a gateway that
// died before its cancel went out, left the call waiting the whole 20 s,
// counted in flight long after its decision (a fault-harness run failed
// on such a call, most likely this way).
func (e *execution) awaitOrder() *pb.StopCall {
	e.mu.Lock()
	e.awaiting = true
	e.mu.Unlock()
	now := time.Now()
	by := e.decideBy(now)
	t := time.NewTimer(by.Sub(now))
	defer t.Stop()
	ended := e.stream.Context().Done()
	for {
		select {
		case <-e.ordered:
			return e.decided()
		case <-t.C:
			return e.decided()
		case <-ended:
			ended = nil
			if soon := time.Now().Add(callerGoneWait); soon.Before(by) {
				t.Reset(time.Until(soon))
			}
		}
	}
}

// endAsOrdered ends a call the coordinator settled without this worker,
// as its stop order says: the order is the decision, so no settle RPC
// is needed to learn it.
func (e *execution) endAsOrdered(order *pb.StopCall, stoppedAt time.Time) error {
	e.outcome = "cancelled"
	e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
	return e.sendEnd(order.GetState(), order.GetInitiator(), order.GetReason())
}

// decided is the coordinator's stop order for the call, once one has
// reached the worker: someone else's decision, already made. The worker's
// own order after it lost its lease is not one (finish fails the call).
func (e *execution) decided() *pb.StopCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ownOrder {
		return nil
	}
	return e.order
}

// settleUnlessOrdered settles the call with rpc, retried as settle does,
// unless the coordinator's stop order reaches the worker first (before
// an attempt, or while it waits to retry): then it returns the order and
// sends nothing more, as the decision is made.
func (e *execution) settleUnlessOrdered(rpc func(context.Context) error) (*pb.StopCall, error) {
	var order *pb.StopCall
	err := e.w.settle(e.stream.Context(), func(ctx context.Context) error {
		if order = e.decided(); order != nil {
			return nil
		}
		return rpc(ctx)
	})
	return order, err
}

func (e *execution) complete(res *answer, stoppedAt time.Time) error {
	var r *pb.CompleteResponse
	order, err := e.settleUnlessOrdered(func(ctx context.Context) (err error) {
		r, err = e.w.ctrl.completeCall(ctx, &pb.CompleteRequest{Call: e.ref, StoppedAt: timestamppb.New(stoppedAt), ToolError: res.toolError,
			ChildRequests: e.children.records(), TaskResultJson: e.taskResult(res.body)})
		return err
	})
	if err != nil {
		return err
	}
	if order != nil {
		e.outcome = "lost"
		e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
		return e.sendEnd(order.GetState(), order.GetInitiator(), order.GetReason())
	}
	// Only this worker completes its call: a completion found already
	// made is this one, retried after its reply was lost.
	if res := r.GetResult(); res != pb.SettleResult_SETTLE_RESULT_WON && res != pb.SettleResult_SETTLE_RESULT_ALREADY_COMPLETED {
		e.outcome = "lost"
		e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
		return e.sendEnd(settledState(res), r.GetWinnerInitiator(), r.GetWinnerReason())
	}
	e.outcome = "completed"
	if res.toolError {
		e.outcome = "tool_error"
	}
	return e.send(&pb.ExecuteResponse{Event: &pb.ExecuteResponse_Result{Result: &pb.ExecuteResult{ResultJson: res.body, ErrorJson: res.rpcErr, ToolError: &res.toolError}}})
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
	order, err := e.settleUnlessOrdered(func(ctx context.Context) (err error) {
		r, err = e.w.coord.Fail(ctx, &pb.FailRequest{Call: e.ref, Initiator: who, Reason: herr.Error(), StoppedAt: timestamppb.New(stoppedAt),
			ChildRequests: e.children.records()})
		return err
	})
	if err != nil {
		return err
	}
	if order != nil {
		e.outcome = "lost"
		e.w.ctrl.reportStopped(e.ref.CallId, stoppedAt)
		return e.sendEnd(order.GetState(), order.GetInitiator(), order.GetReason())
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
	var r *pb.CancelResponse
	order, err := e.settleUnlessOrdered(func(ctx context.Context) (err error) {
		r, err = e.w.coord.Cancel(ctx, &pb.CancelRequest{
			Target: &pb.CancelRequest_Call{Call: e.ref}, Initiator: who, Reason: reason, StoppedAt: timestamppb.New(stoppedAt),
			ChildRequests: e.children.records(),
		})
		return err
	})
	if err != nil {
		e.outcome = "cancelled"
		return err
	}
	if order != nil {
		return e.endAsOrdered(order, stoppedAt)
	}
	e.outcome = "cancelled"
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
	retry := backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}
	for {
		// Each attempt has its own deadline: a reply lost on the way back
		// must not hold the call until settleTimeout, when a retry would be
		// recognised as the decision that already won.
		gen := w.conn.Gen()
		actx, acancel := context.WithTimeout(ctx, settleAttemptTimeout)
		err := rpc(actx)
		unanswered := actx.Err() != nil && ctx.Err() == nil // its own deadline passed
		acancel()
		if err == nil {
			return nil
		}
		switch c := status.Code(err); {
		case c == codes.DeadlineExceeded && unanswered:
			// A commit takes milliseconds: a link that answers nothing in
			// this long has likely lost its replies, and every retry on it
			// would wait as long until keepalive gives up (15 s). Retry
			// on fresh sockets; the retry of a decision that won is
			// recognised as won.
			w.redial(gen, errors.New("a settle attempt went unanswered"))
		case c == codes.Unavailable, c == codes.DeadlineExceeded:
		case c == codes.Canceled && ctx.Err() == nil:
			// Cut off by a redial, here or by another call's settle.
		default:
			w.log.Error("settling call", "err", err)
			return status.Errorf(codes.Internal, "could not settle the call: %v", status.Convert(err).Message())
		}
		if retry.Wait(ctx) != nil {
			return status.Error(codes.Unavailable, "coordinator unreachable; the call's outcome is undecided")
		}
	}
}

// settleTimeout bounds how long a worker keeps trying to reach a
// coordinator to settle one call.
const settleTimeout = 30 * time.Second

// settleAttemptTimeout bounds one attempt: a commit takes milliseconds,
// so an attempt past this has lost its reply or its replica.
const settleAttemptTimeout = 2 * time.Second
