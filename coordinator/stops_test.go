package coordinator_test

import (
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// stopsEnv is two replicas on one etcd, replica a's etcd work counted, and
// a fake worker attached to a: a stop order reaches it from a's watch,
// whichever replica decided, and its stop reports go to a.
type stopsEnv struct {
	ops    *etcdOps
	a, b   pb.CoordinatorServiceClient
	worker *fakeWorker
	probe  *clientv3.Client // the test's own reads, not counted
	next   int64
}

func newStopsEnv(t *testing.T) *stopsEnv {
	t.Helper()
	cluster := etcdtest.Single(t)
	e := &stopsEnv{ops: &etcdOps{}, probe: cluster.Client()}
	counted := cluster.Client()
	e.ops.count(counted)
	// Keep background work (health probes, janitor rounds) out of the count.
	quiet := func(name string) coordinator.Options {
		return coordinator.Options{Name: name, HealthInterval: time.Hour, LeaseTTL: time.Minute}
	}
	e.a = testcluster.StartCoordinator(t, counted, quiet("a")).Client(t)
	e.b = testcluster.StartCoordinator(t, cluster.Client(), quiet("b")).Client(t)
	e.worker = attachFake(t, e.a, "own", "ghost")
	waitTools(t, e.b, "ghost")
	return e
}

// cancelled begins a call through a, cancels it through decider and
// returns it once its stop order reached the worker.
func (e *stopsEnv) cancelled(t *testing.T, decider pb.CoordinatorServiceClient) *pb.BeginResponse {
	t.Helper()
	e.next++
	k := key("conn:a", num(e.next))
	b, err := e.a.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: "ghost", Principal: "alice", Gateway: "g1"})
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	resp, err := decider.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_CLIENT, Reason: "stop"})
	if err != nil || resp.Result != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel = %v, %v", resp, err)
	}
	if m, err := e.worker.stream.Recv(); err != nil || m.GetStop().GetCallId() != b.CallId {
		t.Fatalf("stop order = %v, %v", m, err)
	}
	return b
}

// reportStop sends the worker's stop report and returns replica a's etcd
// work until the owner key was cleared and its commits (at least commits)
// answered: etcd shows a write before its Txn's answer is back.
func (e *stopsEnv) reportStop(t *testing.T, b *pb.BeginResponse, at time.Time, commits int64) opCounts {
	t.Helper()
	e.ops.reset()
	if err := e.worker.stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Stopped{Stopped: &pb.HandlerStopped{CallId: b.CallId, StoppedAt: timestamppb.New(at)}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the owner key cleared", func() bool {
		resp, err := e.probe.Get(t.Context(), prefix+"owners/own/"+b.CallId, clientv3.WithCountOnly())
		return err == nil && resp.Count == 0 && e.ops.commits.Load() >= commits
	})
	return e.ops.snapshot()
}

// stoppedAt is the call's one audit record's stopped_at.
func (e *stopsEnv) stoppedAt(t *testing.T, b *pb.BeginResponse) time.Time {
	t.Helper()
	as := auditsFrom(t, e.probe)[b.CallId]
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].StoppedAt == nil {
		t.Fatalf("audit of %s = %+v, want one cancelled record with stopped_at", b.CallId, as)
	}
	return *as[0].StoppedAt
}

// A stop report for a call the receiving replica settled is written from
// what its decision wrote, with no read of the call or its audit record;
// one for a call another replica settled reads both. Either way stopped_at
// is the worker's.
func TestStopReportOfOwnDecisionReadsNothing(t *testing.T) {
	e := newStopsEnv(t)
	at := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)

	own := e.cancelled(t, e.a)
	if got := e.reportStop(t, own, at, 1); got.Reads != 0 || got.Commits != 1 {
		t.Fatalf("stop of a call a decided: %+v, want no read and one commit", got)
	}
	if got := e.stoppedAt(t, own); !got.Equal(at) {
		t.Fatalf("stopped_at = %v, want %v", got, at)
	}

	other := e.cancelled(t, e.b)
	if got := e.reportStop(t, other, at, 1); got.Reads != 2 || got.Commits != 1 {
		t.Fatalf("stop of a call b decided: %+v, want the call and audit read, and one commit", got)
	}
	if got := e.stoppedAt(t, other); !got.Equal(at) {
		t.Fatalf("stopped_at = %v, want %v", got, at)
	}
}

// A call whose audit record moved after the decision (here: a stop written
// by another hand) is not written from memory: the guard fails, the report
// is read, and the stop first written stands. The owner key is cleared.
func TestStopReportAfterTheAuditMoved(t *testing.T) {
	e := newStopsEnv(t)
	b := e.cancelled(t, e.a)
	resp, err := e.probe.Get(t.Context(), testcluster.AuditPrefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("audit = %v, %v", resp, err)
	}
	var a coordinator.AuditRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &a); err != nil {
		t.Fatal(err)
	}
	first := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	a.StoppedAt = &first
	moved, err := json.Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.probe.Put(t.Context(), string(resp.Kvs[0].Key), string(moved), clientv3.WithIgnoreLease()); err != nil {
		t.Fatal(err)
	}

	got := e.reportStop(t, b, time.Now(), 2)
	if got.Reads != 2 || got.Commits != 2 {
		t.Fatalf("etcd work = %+v, want a commit refused, the call and audit read, and a second commit", got)
	}
	if at := e.stoppedAt(t, b); !at.Equal(first) {
		t.Fatalf("stopped_at = %v, want the first, %v", at, first)
	}
}
