package coordinator_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// Run: go test ./coordinator -run '^$' -bench . -benchtime 2000x
//
// Every benchmark runs on an embedded etcd with fsync on, and reports the
// floor measured in the same run beside our figures.

// BenchmarkFloor measures what one decision cannot beat: a CAS Txn on etcd,
// and the same Txn until a watch on a second client sees it.
func BenchmarkFloor(b *testing.B) {
	cl := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true})
	cas, watch := floor(b, cl.Client(), cl.Client(), b.N)
	report(b, "cas", cas)
	report(b, "cas+watch", watch)
}

func floor(b *testing.B, writer, watcher *clientv3.Client, n int) (cas, watch []time.Duration) {
	ctx := b.Context()
	wch := watcher.Watch(ctx, "floor/k")
	put, err := writer.Put(ctx, "floor/k", "0")
	if err != nil {
		b.Fatal(err)
	}
	<-wch
	rev := put.Header.Revision
	for range n {
		start := time.Now()
		resp, err := writer.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("floor/k"), "=", rev)).
			Then(clientv3.OpPut("floor/k", "x")).Commit()
		if err != nil || !resp.Succeeded {
			b.Fatalf("floor txn: %v", err)
		}
		cas = append(cas, time.Since(start))
		<-wch
		watch = append(watch, time.Since(start))
		rev = resp.Header.Revision
	}
	return cas, watch
}

// BenchmarkCancelPropagation measures, per cancelled call, the time from
// the Cancel RPC's start (and from its return) until the handler's context
// is done on the worker, cancel delivered by the coordinator's push (the
// any-replica path; the gateway's fast path is not used).
func BenchmarkCancelPropagation(b *testing.B) {
	cl := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true})
	cli := cl.Client()
	coord := testcluster.StartCoordinator(b, cli, coordOpts())
	doneAt := make(chan time.Time, 1)
	started := make(chan struct{}, 1)
	w := testcluster.StartWorker(b, worker.Options{Coordinator: coord.Addr, Name: "bench"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "wait"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			started <- struct{}{}
			<-ctx.Done()
			doneAt <- time.Now()
			return nil, ctx.Err()
		})
	})
	c, wc := coord.Client(b), w.Client(b)
	var fromStart, fromReturn []time.Duration
	commits := committed(b)
	b.ResetTimer()
	for i := range b.N {
		k := &pb.CallKey{Scope: "conn:bench", RequestId: num(int64(i))}
		bg, err := c.Begin(b.Context(), &pb.BeginRequest{Key: k, Tool: "wait"})
		if err != nil {
			b.Fatal(err)
		}
		s, err := wc.Execute(b.Context(), &pb.ExecuteRequest{CallId: bg.CallId, Fence: bg.Fence, Tool: "wait"})
		if err != nil {
			b.Fatal(err)
		}
		<-started
		start := time.Now()
		if _, err := c.Cancel(b.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_CLIENT}); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		done := <-doneAt
		fromStart = append(fromStart, done.Sub(start))
		fromReturn = append(fromReturn, max(0, done.Sub(returned)))
		for {
			if _, err := s.Recv(); err != nil {
				break
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(committed(b)-commits)/float64(b.N), "commits/call")
	report(b, "cancel", fromStart)
	report(b, "after-return", fromReturn)
	cas, watch := floor(b, cli, cl.Client(), min(b.N, 2000))
	report(b, "floor-cas", cas)
	report(b, "floor-watch", watch)
}

// BenchmarkCompletedCall measures etcd commits for a call that completes,
// and the two halves of its latency, each of which waits on one commit:
// Begin (the RPC), and Execute (the stream's start until its end, which
// holds the worker's completion). The floor's CAS, measured first in the
// same run, is what each half cannot beat.
func BenchmarkCompletedCall(b *testing.B) {
	cl := etcdtest.Start(b, 1, etcdtest.Options{Fsync: true})
	coord := testcluster.StartCoordinator(b, cl.Client(), coordOpts())
	w := testcluster.StartWorker(b, worker.Options{Coordinator: coord.Addr, Name: "bench"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "echo"}, func(ctx context.Context, c *worker.Call) (*worker.Result, error) {
			return worker.Text("ok"), nil
		})
	})
	c, wc := coord.Client(b), w.Client(b)
	cas, _ := floor(b, cl.Client(), cl.Client(), max(b.N, 100))
	begins, executes := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	commits := committed(b)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		bg, err := c.Begin(b.Context(), &pb.BeginRequest{Key: &pb.CallKey{Scope: "conn:bench", RequestId: num(int64(i))}, Tool: "echo"})
		if err != nil {
			b.Fatal(err)
		}
		begun := time.Now()
		s, err := wc.Execute(b.Context(), &pb.ExecuteRequest{CallId: bg.CallId, Fence: bg.Fence, Tool: "echo"})
		if err != nil {
			b.Fatal(err)
		}
		completed(b, s)
		begins, executes = append(begins, begun.Sub(start)), append(executes, time.Since(begun))
	}
	b.StopTimer()
	b.ReportMetric(float64(committed(b)-commits)/float64(b.N), "commits/call")
	report(b, "floor-cas", cas)
	report(b, "begin", begins)
	report(b, "execute", executes)
}

// completed reads an Execute stream to its end, and fails the benchmark
// unless the call completed: a result, then the stream's clean end.
func completed(b *testing.B, s pb.WorkerService_ExecuteClient) {
	result := false
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		result = result || ev.GetResult() != nil
	}
	if !result {
		b.Fatal("the call ended without a result")
	}
}

// committed reads etcd's own count of committed Raft proposals.
func committed(b *testing.B) float64 {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_server_proposals_committed_total" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	b.Fatal("etcd_server_proposals_committed_total not found")
	return 0
}

func report(b *testing.B, name string, ds []time.Duration) {
	slices.Sort(ds)
	q := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), name+"-p50-ms")
	b.ReportMetric(q(0.99), name+"-p99-ms")
}

func coordOpts() coordinator.Options { return coordinator.Options{} }
