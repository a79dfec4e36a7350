package worker_test

import (
	"context"
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// waitCalls drives calls of a tool "wait", whose handler runs until its
// context ends, on a worker of its own, the way a gateway does.
type waitCalls struct {
	c       pb.CoordinatorServiceClient
	w       *testcluster.Worker
	wc      pb.WorkerServiceClient
	started chan struct{}
}

// startWaitCalls starts the worker name, attached at coordAddr (the
// coordinator c, or a proxy in front of it).
func startWaitCalls(tb testing.TB, c pb.CoordinatorServiceClient, coordAddr, name string) *waitCalls {
	return startWaitCallsWith(tb, c, worker.Options{Coordinator: coordAddr, Name: name})
}

// startWaitCallsWith is startWaitCalls with the worker's options.
func startWaitCallsWith(tb testing.TB, c pb.CoordinatorServiceClient, opts worker.Options) *waitCalls {
	wt := &waitCalls{c: c, started: make(chan struct{}, 1)}
	wt.w = testcluster.StartWorker(tb, opts, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "wait"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			wt.started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		})
	})
	wt.wc = wt.w.Client(tb)
	return wt
}

// end begins call id and executes it; once its handler runs, the client's
// Cancel wins first if cancel says so, then the Execute stream closes, as
// the gateway's fast path closes it. It returns the call's id once the
// worker has settled the call and runs no handler.
func (wt *waitCalls) end(tb testing.TB, id int64, cancel bool) string {
	tb.Helper()
	k := &pb.CallKey{Scope: "conn:wait", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: id}}}
	bg, err := wt.c.Begin(tb.Context(), &pb.BeginRequest{Key: k, Tool: "wait"})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, closeStream := context.WithCancel(tb.Context())
	defer closeStream()
	if _, err := wt.wc.Execute(ctx, &pb.ExecuteRequest{CallId: bg.CallId, Fence: bg.Fence, Tool: "wait", Worker: bg.Worker, Deadline: bg.Deadline}); err != nil {
		tb.Fatal(err)
	}
	<-wt.started
	if cancel {
		resp, err := wt.c.Cancel(tb.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_CLIENT, Reason: "the client's"})
		if err != nil || resp.GetResult() != pb.CancelResult_CANCEL_RESULT_CANCELLED {
			tb.Fatalf("cancel: %v %v", resp, err)
		}
	}
	closeStream()
	awaitIdle(tb, wt.w)
	return bg.CallId
}
