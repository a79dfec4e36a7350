package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// progressTTL gives workers a heartbeat every second (a third of it).
const progressTTL = 3 * time.Second

// stepper is a tool whose handler reports each progress the test sends it
// and returns when the channel closes; quiet reports none.
type stepper struct{ steps chan float64 }

func (s *stepper) register(w *worker.Worker) {
	w.Handle(worker.Tool{Name: "step"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		for {
			select {
			case p, ok := <-s.steps:
				if !ok {
					return worker.Text("done"), nil
				}
				c.Progress(p, 10, fmt.Sprintf("step %v", p))
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	})
	w.Handle(worker.Tool{Name: "quiet"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
}

// startOn begins a call of tool and executes it on w, without asking for
// progress on the stream: the listing shows what the handler reported
// whether or not its client asked.
func startOn(t *testing.T, e *env, w *testcluster.Worker, k *pb.CallKey, tool string) (*pb.BeginResponse, pb.WorkerService_ExecuteClient) {
	t.Helper()
	b := e.begin(t, e.c, k, tool)
	s, err := w.Client(t).Execute(t.Context(), &pb.ExecuteRequest{CallId: b.CallId, Fence: b.Fence, Tool: tool, ArgumentsJson: []byte(`{}`), Deadline: b.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	return b, s
}

// listedWith waits until ListCalls satisfies ok, and returns the calls by id.
func listedWith(t *testing.T, admin pb.AdminServiceClient, what string, ok func(map[string]*pb.RunningCall) bool) map[string]*pb.RunningCall {
	t.Helper()
	var calls map[string]*pb.RunningCall
	testcluster.WaitFor(t, what, func() bool {
		resp, err := admin.ListCalls(t.Context(), &pb.ListCallsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		calls = map[string]*pb.RunningCall{}
		for _, c := range resp.Calls {
			calls[c.GetCall().GetCallId()] = c
		}
		return ok(calls)
	})
	return calls
}

// TestListCallsShowsLastProgress has a handler report progress and sees
// ListCalls follow it within a heartbeat, while a call that reported none
// shows none, even when another worker's digest names it; once the call
// settled it is not listed, though its worker's digest still names it.
func TestListCallsShowsLastProgress(t *testing.T) {
	e := newEnv(t, envOptions{coord: coordinator.Options{LeaseTTL: progressTTL}})
	admin := adminClient(t, e)
	st := &stepper{steps: make(chan float64)}
	w2 := testcluster.StartWorker(t, worker.Options{Coordinator: e.coords[0].Addr, Name: "w2"}, st.register)
	waitTools(t, e.c, "step")
	step, stepStream := startOn(t, e, w2, key("conn:1", num(1)), "step")
	quiet, _ := startOn(t, e, w2, key("conn:1", num(2)), "quiet")
	// Another worker's digest may not speak for w2's call.
	if _, err := e.cli.Put(t.Context(), prefix+"progress/w9", fmt.Sprintf(`{"calls":[{"call_id":%q,"at":"2026-01-01T00:00:00Z","progress":7}]}`, quiet.CallId)); err != nil {
		t.Fatal(err)
	}

	for _, p := range []float64{3, 5} {
		st.steps <- p
		calls := listedWith(t, admin, fmt.Sprintf("progress %v to be listed", p), func(calls map[string]*pb.RunningCall) bool {
			return calls[step.CallId].GetProgress() == p && calls[quiet.CallId] != nil
		})
		got := calls[step.CallId]
		if got.GetLastProgress() == nil || got.GetTotal() != 10 || got.GetProgressMessage() != fmt.Sprintf("step %v", p) {
			t.Errorf("step call: progress %v/%v %q at %v, want %v/10 \"step %v\" with its time", got.GetProgress(), got.GetTotal(), got.GetProgressMessage(), got.GetLastProgress(), p, p)
		}
		if q := calls[quiet.CallId]; q.GetLastProgress() != nil || q.GetProgress() != 0 || q.GetProgressMessage() != "" {
			t.Errorf("quiet call: progress %v %q at %v, want none", q.GetProgress(), q.GetProgressMessage(), q.GetLastProgress())
		}
	}

	close(st.steps)
	if _, err := stepStream.Recv(); err != nil {
		t.Fatalf("step call's result: %v", err)
	}
	listedWith(t, admin, "the settled call to leave the listing", func(calls map[string]*pb.RunningCall) bool {
		return calls[step.CallId] == nil && calls[quiet.CallId] != nil
	})
	digest, err := e.cli.Get(t.Context(), prefix+"progress/w2")
	if err != nil {
		t.Fatal(err)
	}
	if len(digest.Kvs) != 1 || !strings.Contains(string(digest.Kvs[0].Value), step.CallId) {
		t.Errorf("progress/w2 = %v, want the last digest, still naming the settled call (no progress changed since)", digest.Kvs)
	}
}

// TestProgressDigestWritesAtMostOncePerHeartbeat has a handler report
// progress as fast as it can, thousands of times, and counts the writes of
// its worker's digest: at most one per heartbeat interval.
func TestProgressDigestWritesAtMostOncePerHeartbeat(t *testing.T) {
	e := newEnv(t, envOptions{coord: coordinator.Options{LeaseTTL: progressTTL}})
	every := progressTTL / 3
	stop := make(chan struct{})
	var reports atomic.Int64
	w2 := testcluster.StartWorker(t, worker.Options{Coordinator: e.coords[0].Addr, Name: "w2"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "flood"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			for p := 1.0; ; p++ {
				select {
				case <-stop:
					return worker.Text("done"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				default:
				}
				c.Progress(p, 0, "flood")
				reports.Add(1)
			}
		})
	})
	waitTools(t, e.c, "flood")
	watch := e.cli.Watch(t.Context(), prefix+"progress/w2", clientv3.WithRev(e.revision(t)+1))
	start := time.Now()
	_, s := startOn(t, e, w2, key("conn:1", num(1)), "flood")

	writes := 0
	for writes < 3 || reports.Load() < 1000 {
		select {
		case wr := <-watch:
			if err := wr.Err(); err != nil {
				t.Fatal(err)
			}
			writes += len(wr.Events)
		case <-time.After(10 * every):
			t.Fatalf("after %d writes and %d reports, no digest for %v", writes, reports.Load(), 10*every)
		}
	}
	elapsed := time.Since(start)
	close(stop)
	if _, err := s.Recv(); err != nil {
		t.Fatalf("flood call's result: %v", err)
	}
	if limit := int(elapsed/every) + 1; writes > limit {
		t.Errorf("%d digest writes in %v for %d reports, want at most %d (one per %v heartbeat)", writes, elapsed, reports.Load(), limit, every)
	}
	t.Logf("%d reports, %d digest writes in %v", reports.Load(), writes, elapsed)
}
