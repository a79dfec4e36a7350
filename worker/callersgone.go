package worker

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// maxCallersGone bounds the calls one CallersGone names.
const maxCallersGone = 10000

// maxDecideWait bounds how long a call stopped by CallersGone waits for
// the coordinator's decision before the worker cancels it itself.
const maxDecideWait = time.Minute

// CallersGone implements WorkerService.CallersGone: a gateway whose
// client left (or that is shutting down) stops the handlers of that
// client's calls at once, before its cancellation is decided, so that the
// work ends when the caller does and not one etcd commit per batch later.
// The decision still comes from the coordinator: each call then ends as
// its stop order says (finish), or, if none comes by decide_by, is
// cancelled by the worker as a caller gone.
func (w service) CallersGone(ctx context.Context, req *pb.CallersGoneRequest) (*pb.CallersGoneResponse, error) {
	if len(req.GetCallIds()) > maxCallersGone {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d call ids at once", maxCallersGone)
	}
	now := time.Now()
	by := req.GetDecideBy().AsTime()
	if lo := now.Add(callerGoneWait); by.Before(lo) {
		by = lo
	}
	if hi := now.Add(maxDecideWait); by.After(hi) {
		by = hi
	}
	// Only the connection that runs a call may end it early: a call id
	// reaches other gateway replicas (answers are routed by it).
	conn := connOf(ctx)
	var stopped int32
	for _, e := range w.executions(req.GetCallIds()) {
		if conn != "" && connOf(e.stream.Context()) == conn && e.callerGone(by) {
			stopped++
		}
	}
	return &pb.CallersGoneResponse{Stopped: stopped}, nil
}

// executions are the calls running here among ids, looked up under one
// hold of w.mu.
func (w *Worker) executions(ids []string) []*execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	var es []*execution
	for _, id := range ids {
		if e := w.calls[id]; e != nil {
			es = append(es, e)
		}
	}
	return es
}

// callerGone stops a running call whose caller left; its decision is
// awaited until by. It reports whether the call was running. A task
// outlives its caller and is left alone.
func (e *execution) callerGone(by time.Time) bool {
	if e.task {
		return false
	}
	e.mu.Lock()
	if e.state != running {
		e.mu.Unlock()
		return false
	}
	// finish awaits the decision and reports the stop itself (settle.go).
	e.state, e.goneBy, e.awaiting = stopped, by, true
	e.mu.Unlock()
	e.markCancelled()
	e.cancel(errCallerGone)
	return true
}

// decideBy is how long a call whose caller went waits for the
// coordinator's stop order: callerGoneWait, or longer if its gateway said
// its cancellation was on the way.
func (e *execution) decideBy(now time.Time) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if by := now.Add(callerGoneWait); by.After(e.goneBy) {
		return by
	}
	return e.goneBy
}

// connOf names the TCP connection ctx's RPC came on by its peer's
// address: unique among the connections open at once. It is empty for
// any other kind of connection, which may then end no call early.
func connOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		if a, ok := p.Addr.(*net.TCPAddr); ok {
			return a.String()
		}
	}
	return ""
}
