package coordinator_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// scopeHistory is a coordinator whose etcd work is counted, and a scope
// that made many calls of which a few still run.
type scopeHistory struct {
	ops     *etcdOps
	c       pb.CoordinatorServiceClient
	scope   string
	running []string
}

// newScopeHistory begins settled calls (each completed) and then running
// ones in one scope.
func newScopeHistory(tb testing.TB, settled, running int) *scopeHistory {
	tb.Helper()
	cli := etcdtest.Single(tb).Client()
	h := &scopeHistory{ops: &etcdOps{}, scope: "conn:history"}
	h.ops.count(cli)
	// Keep background work (health probes, janitor rounds) out of the count.
	co := testcluster.StartCoordinator(tb, cli, coordinator.Options{Name: "a", HealthInterval: time.Hour, LeaseTTL: time.Minute})
	testcluster.StartWorker(tb, worker.Options{Coordinator: co.Addr, Name: "w1"}, newHoldTool(false).register)
	h.c = co.Client(tb)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(settled) && !tb.Failed(); i = next.Add(1) - 1 {
				b := h.begin(tb, i)
				ref := &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker}
				if _, err := h.c.Complete(tb.Context(), &pb.CompleteRequest{Call: ref}); err != nil {
					tb.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i := range running {
		h.running = append(h.running, h.begin(tb, int64(settled+i)).CallId)
	}
	return h
}

func (h *scopeHistory) begin(tb testing.TB, id int64) *pb.BeginResponse {
	b, err := h.c.Begin(tb.Context(), &pb.BeginRequest{Key: key(h.scope, num(id)), Tool: "hold", Principal: "alice"})
	if err != nil {
		tb.Fatalf("begin %d: %v", id, err)
	}
	return b
}

// disconnect cancels the scope and returns what it cost etcd.
func (h *scopeHistory) disconnect(tb testing.TB) opCounts {
	h.ops.reset()
	resp, err := h.c.CancelScope(tb.Context(), &pb.CancelScopeRequest{
		Scope: h.scope, Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "client gone",
	})
	got := h.ops.snapshot()
	if err != nil {
		tb.Fatal(err)
	}
	if int(resp.Cancelled) != len(h.running) {
		tb.Fatalf("cancelled %d calls, want the %d running", resp.Cancelled, len(h.running))
	}
	return got
}

// Disconnecting a scope costs etcd what the scope has running, not what
// it did: with 2,000 calls made and 10 running, one read returning 10
// keys and one commit (issue 14 item 6); BenchmarkDisconnectScope shows
// the same for 20,000. -short makes 500.
func TestDisconnectCostsWhatIsRunning(t *testing.T) {
	settled := 2000
	if testing.Short() {
		settled = 500
	}
	const running = 10
	h := newScopeHistory(t, settled, running)
	got := h.disconnect(t)
	t.Logf("disconnecting a scope with %d calls made, %d running: %d etcd reads returning %d keys, %d commits (%d doomed)",
		settled+running, running, got.Reads, got.Keys, got.Commits, got.Doomed)
	if got.Keys > running || got.Reads > 2 || got.Commits > 1 || got.Doomed > 0 {
		t.Fatalf("cost %+v; want at most 2 reads of %d keys and 1 commit", got, running)
	}
	// A late cancel of a call that settled costs no doomed transaction.
	h.ops.reset()
	r, err := h.c.Cancel(t.Context(), &pb.CancelRequest{
		Target: &pb.CancelRequest_Key{Key: key(h.scope, num(0))}, Initiator: pb.Initiator_INITIATOR_CLIENT,
	})
	late := h.ops.snapshot()
	if err != nil || r.Result != pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED {
		t.Fatalf("late cancel = %v, %v", r, err)
	}
	t.Logf("a late cancel of a completed call: %d reads, %d commits (%d doomed)", late.Reads, late.Commits, late.Doomed)
	if late.Doomed > 0 || late.Commits > 1 {
		t.Fatalf("late cancel cost %+v; want only its cancel_lost commit", late)
	}
}

// BenchmarkDisconnectScope reports the etcd work of disconnecting a scope
// that made 20,000 calls with 10 still running, per disconnect.
func BenchmarkDisconnectScope(b *testing.B) {
	const settled, running = 20000, 10
	var total opCounts
	for b.Loop() {
		b.StopTimer()
		h := newScopeHistory(b, settled, running)
		b.StartTimer()
		got := h.disconnect(b)
		total.Reads += got.Reads
		total.Commits += got.Commits
		total.Keys += got.Keys
	}
	b.ReportMetric(float64(total.Reads)/float64(b.N), "reads/op")
	b.ReportMetric(float64(total.Keys)/float64(b.N), "keys-read/op")
	b.ReportMetric(float64(total.Commits)/float64(b.N), "commits/op")
}
