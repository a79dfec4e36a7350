package coordinator_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// jitter is the spread of both the tool's running time and the cancel's
// delay, so that cancels land on either side of completion.
const jitter = 2 * time.Millisecond

// workFor is a tool that works for a random time under jitter, honouring
// cancellation, as a real tool does.
func workFor(ctx context.Context, c *worker.Call) (*worker.Result, error) {
	t := time.NewTimer(rand.N(2 * jitter))
	defer t.Stop()
	select {
	case <-t.C:
		return worker.Text("done"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Seed (d): completion and cancellation forced concurrently, many times.
// Every time exactly one wins, and the loser leaves no trace: a won cancel
// means no result left the worker and no completed record exists; a won
// completion means the result went out and no cancelled record exists.
func TestRaceCompleteVsCancel(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 1000
	}
	e := newEnv(t, envOptions{})
	w := testcluster.StartWorker(t, worker.Options{Coordinator: e.coords[0].Addr, Name: "racer"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "work"}, workFor)
	})
	waitTools(t, e.c, "work")
	wc := w.Client(t)

	type outcome struct {
		callID string
		cancel pb.CancelResult
		result bool // the final event was a result
	}
	results := make([]outcome, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && !t.Failed(); i = int(next.Add(1)) - 1 {
				results[i] = raceOnce(t, e, wc, int64(i))
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	all := auditsFrom(t, e.cli)
	var cancelled, completed int
	for i, r := range results {
		got := outcomes(all[r.callID])
		switch r.cancel {
		case pb.CancelResult_CANCEL_RESULT_CANCELLED:
			cancelled++
			if r.result || len(got) != 1 || got[0] != "cancelled" {
				t.Fatalf("call %d: cancel won but result sent=%v, audit=%v", i, r.result, got)
			}
		case pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED:
			completed++
			if !r.result || len(got) != 2 || got[0] != "completed" || got[1] != "cancel_lost" {
				t.Fatalf("call %d: completion won but result sent=%v, audit=%v", i, r.result, got)
			}
		default:
			t.Fatalf("call %d: cancel = %v", i, r.cancel)
		}
	}
	t.Logf("%d races: %d cancels won, %d completions won", n, cancelled, completed)
	if cancelled < n/100 || completed < n/100 {
		t.Fatalf("the race was not exercised: %d cancels won, %d completions won", cancelled, completed)
	}
}

func raceOnce(t *testing.T, e *env, wc pb.WorkerServiceClient, i int64) (o struct {
	callID string
	cancel pb.CancelResult
	result bool
}) {
	k := key("conn:race", num(i))
	b, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: "work"})
	if err != nil {
		t.Errorf("begin %d: %v", i, err)
		return o
	}
	o.callID = b.CallId
	s, err := wc.Execute(t.Context(), &pb.ExecuteRequest{CallId: b.CallId, Fence: b.Fence, Tool: "work", Deadline: b.Deadline})
	if err != nil {
		t.Errorf("execute %d: %v", i, err)
		return o
	}
	done := make(chan *pb.ExecuteResponse, 1)
	go func() { // owned: we wait on done below
		var last *pb.ExecuteResponse
		for {
			m, err := s.Recv()
			if err != nil {
				done <- last
				return
			}
			last = m
		}
	}()
	timer := time.NewTimer(rand.N(jitter))
	<-timer.C
	resp, err := e.c.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_CLIENT})
	if err != nil {
		t.Errorf("cancel %d: %v", i, err)
		<-done
		return o
	}
	o.cancel = resp.Result
	last := <-done
	o.result = last.GetResult() != nil
	if last.GetResult() == nil && last.GetCancelled() == nil {
		t.Errorf("call %d ended with %v", i, last)
	}
	return o
}
