package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// Begin on one replica, Cancel on the other, the worker attached to either:
// the cancel reaches the handler through etcd and the worker's replica.
func TestCancelAcrossReplicas(t *testing.T) {
	for _, tc := range []struct {
		workerOn, beginOn, cancelOn int
	}{
		{0, 0, 1}, {0, 1, 1}, {1, 0, 1}, {1, 1, 0},
	} {
		t.Run(fmt.Sprintf("worker@%d begin@%d cancel@%d", tc.workerOn, tc.beginOn, tc.cancelOn), func(t *testing.T) {
			e := newEnv(t, envOptions{replicas: 2, workerTo: []int{tc.workerOn}})
			clients := []pb.CoordinatorServiceClient{e.coords[0].Client(t), e.coords[1].Client(t)}
			waitTools(t, clients[1], "hold")
			k := key("session:x", num(1))
			b := e.begin(t, clients[tc.beginOn], k, "hold")
			s := e.execute(t, b, "hold", `{}`)
			h := e.hold.next(t)
			if got := e.cancel(t, clients[tc.cancelOn], k, "stop"); got != pb.CancelResult_CANCEL_RESULT_CANCELLED {
				t.Fatalf("cancel = %v", got)
			}
			waitDone(t, h)
			if ev := s.final(t); ev.GetCancelled() == nil {
				t.Fatalf("final = %v, want cancelled", ev)
			}
			if got := outcomes(e.audits(t, b.CallId)); len(got) != 1 || got[0] != "cancelled" {
				t.Fatalf("audit = %v", got)
			}
		})
	}
}

// fakeWorker attaches over the real control stream and can vanish without
// detaching, as a killed process does.
type fakeWorker struct {
	stream pb.CoordinatorService_AttachClient
	kill   context.CancelFunc
}

func attachFake(t *testing.T, c pb.CoordinatorServiceClient, name, tool string) *fakeWorker {
	t.Helper()
	return attachFakeTools(t, c, name, &pb.Tool{Name: tool})
}

// attachFakeTools attaches a fake worker offering tools.
func attachFakeTools(t *testing.T, c pb.CoordinatorServiceClient, name string, tools ...*pb.Tool) *fakeWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	s, err := c.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Hello{Hello: &pb.WorkerHello{
		Name: name, Address: "127.0.0.1:9", Tools: tools,
	}}}); err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil || m.GetAttached() == nil {
		t.Fatalf("attach: %v %v", m, err)
	}
	for _, tool := range tools {
		waitTools(t, c, tool.GetName())
	}
	return &fakeWorker{stream: s, kill: cancel}
}

// A worker killed without cleanup mid-call: the call is FAILED within the
// lease TTL, audited once, and a late Complete from it loses.
func TestWorkerLostFailsItsCalls(t *testing.T) {
	const ttl = time.Second
	e := newEnv(t, envOptions{coord: coordinator.Options{LeaseTTL: ttl}})
	fw := attachFake(t, e.c, "doomed", "ghost")
	b := e.begin(t, e.c, key("conn:a", num(1)), "ghost")
	if b.Worker != "doomed" {
		t.Fatalf("placed on %s", b.Worker)
	}
	watch, err := e.c.WatchAudit(t.Context(), &pb.WatchAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	fw.kill()
	rec, err := watch.Recv()
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(killed)
	if rec.Record.CallId != b.CallId || rec.Record.Outcome != "failed" || rec.Record.Initiator != pb.Initiator_INITIATOR_WORKER_LOST {
		t.Fatalf("audit = %v", rec.Record)
	}
	// The lease expires TTL after its last renewal and the janitor reacts
	// to the expiry at once; the figure is logged below. The bound only
	// catches a call left to its deadline (minutes) instead of the TTL.
	if elapsed > 20*ttl {
		t.Fatalf("failed %v after the kill; the lease TTL is %v", elapsed, ttl)
	}
	late, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: "doomed"}})
	if err != nil || late.Result != pb.SettleResult_SETTLE_RESULT_ALREADY_FAILED {
		t.Fatalf("late complete = %v, %v; want ALREADY_FAILED", late, err)
	}
	if got := outcomes(e.audits(t, b.CallId)); len(got) != 1 {
		t.Fatalf("audit = %v", got)
	}
	ownersLeft(t, e.cli, "doomed", 0)
	t.Logf("failed %v after the kill (TTL %v)", elapsed, ttl)
}

// A worker cut off from its gateway: the gateway's Fail wins, the worker's
// late Complete loses, and the worker is told to stop.
func TestLateCompleteLosesToFail(t *testing.T) {
	e := newEnv(t, envOptions{})
	fw := attachFake(t, e.c, "cutoff", "ghost")
	b := e.begin(t, e.c, key("conn:a", num(1)), "ghost")
	ref := &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker}
	f, err := e.c.Fail(t.Context(), &pb.FailRequest{Call: ref, Initiator: pb.Initiator_INITIATOR_WORKER_LOST, Reason: "execute stream lost"})
	if err != nil || f.Result != pb.SettleResult_SETTLE_RESULT_WON {
		t.Fatalf("fail = %v, %v", f, err)
	}
	m, err := fw.stream.Recv()
	if err != nil || m.GetStop().GetCallId() != b.CallId || m.GetStop().GetState() != pb.CallState_CALL_STATE_FAILED {
		t.Fatalf("stop order = %v, %v", m, err)
	}
	c, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: ref})
	if err != nil || c.Result != pb.SettleResult_SETTLE_RESULT_ALREADY_FAILED {
		t.Fatalf("late complete = %v, %v", c, err)
	}
	if got := outcomes(e.audits(t, b.CallId)); len(got) != 1 || got[0] != "failed" {
		t.Fatalf("audit = %v", got)
	}
}

// A coordinator replica stopped mid-call: the worker re-attaches to the
// other replica with the same lease, and the call still settles once.
func TestCoordinatorReplicaLost(t *testing.T) {
	for _, ending := range []string{"complete", "cancel"} {
		t.Run(ending, func(t *testing.T) {
			e := newEnv(t, envOptions{replicas: 2})
			st := e.w.Status()
			lost := map[string]int{"a": 0, "b": 1}[st.Coordinator]
			survivor := 1 - lost
			c := e.coords[survivor].Client(t)
			waitTools(t, c, "hold")
			k := key("session:x", num(1))
			b := e.begin(t, c, k, "hold")
			s := e.execute(t, b, "hold", `{}`)
			h := e.hold.next(t)

			e.coords[lost].Stop()
			waitFor(t, "re-attach", func() bool { return e.w.Status().Coordinator == []string{"a", "b"}[survivor] })
			if got := e.w.Status().Lease; got != st.Lease {
				t.Fatalf("lease %x after re-attach, want adopted %x", got, st.Lease)
			}
			if ending == "cancel" {
				if got := e.cancel(t, c, k, "stop"); got != pb.CancelResult_CANCEL_RESULT_CANCELLED {
					t.Fatalf("cancel = %v", got)
				}
				waitDone(t, h)
				if ev := s.final(t); ev.GetCancelled() == nil {
					t.Fatalf("final = %v", ev)
				}
			} else {
				h.release <- worker.Text("ok")
				if ev := s.final(t); ev.GetResult() == nil {
					t.Fatalf("final = %v", ev)
				}
			}
			if got := outcomes(e.audits(t, b.CallId)); len(got) != 1 {
				t.Fatalf("audit = %v", got)
			}
		})
	}
}

// A 3-member etcd cluster loses its leader mid-run: every call in flight
// still settles exactly once.
func TestEtcdLeaderLost(t *testing.T) {
	cl := etcdtest.Start(t, 3, etcdtest.Options{})
	e := newEnv(t, envOptions{etcd: cl})
	const n = 10
	type call struct {
		b *pb.BeginResponse
		k *pb.CallKey
		s *execStream
		h *held
	}
	var calls []call
	for i := range n {
		k := key("conn:a", num(int64(i)))
		b := e.begin(t, e.c, k, "hold")
		s := e.execute(t, b, "hold", `{}`)
		calls = append(calls, call{b, k, s, e.hold.next(t)})
	}
	leader := cl.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	stopped := time.Now()
	cl.Members[leader].Close()
	t.Logf("leader stopped in %v", time.Since(stopped))
	defer func() { t.Logf("settled %v after the leader stopped", time.Since(stopped)) }()
	for i, c := range calls {
		if i%2 == 0 {
			c.h.release <- worker.Text("ok")
			if ev := c.s.final(t); ev.GetResult() == nil {
				t.Fatalf("call %d final = %v", i, ev)
			}
			continue
		}
		if got := e.cancel(t, e.c, c.k, "stop"); got != pb.CancelResult_CANCEL_RESULT_CANCELLED {
			t.Fatalf("cancel %d = %v", i, got)
		}
		if ev := c.s.final(t); ev.GetCancelled() == nil {
			t.Fatalf("call %d final = %v", i, ev)
		}
	}
	all := auditsFrom(t, e.cli)
	for i, c := range calls {
		want := []string{"completed", "cancelled"}[i%2]
		if got := outcomes(all[c.b.CallId]); len(got) != 1 || got[0] != want {
			t.Fatalf("call %d audit = %v, want [%s]", i, got, want)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testcluster.WaitFor(t, what, cond)
}

func ownersLeft(t *testing.T, cli *clientv3.Client, worker string, want int64) {
	t.Helper()
	resp, err := cli.Get(t.Context(), prefix+"owners/"+worker+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != want {
		t.Fatalf("%d owner keys left for %s, want %d", resp.Count, worker, want)
	}
}

// A worker that shuts down drains, then detaches: its lease is revoked at
// once rather than left to expire, so no new call is placed on it.
func TestWorkerCloseRevokesLease(t *testing.T) {
	e := newEnv(t, envOptions{coord: coordinator.Options{LeaseTTL: time.Minute}})
	e.w.Stop()
	resp, err := e.cli.Get(t.Context(), prefix+"workers/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d worker keys left after Close; the lease was not revoked", resp.Count)
	}
}

// Regression: a worker that reports a handler's stop twice (it may) must
// not make the coordinator drop the batch: stopped_at is recorded and the
// owner key goes.
func TestDuplicateStopReports(t *testing.T) {
	e := newEnv(t, envOptions{})
	fw := attachFake(t, e.c, "twice", "ghost")
	k := key("conn:a", num(1))
	b := e.begin(t, e.c, k, "ghost")
	if got := e.cancel(t, e.c, k, "stop"); got != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel = %v", got)
	}
	if m, err := fw.stream.Recv(); err != nil || m.GetStop().GetCallId() != b.CallId {
		t.Fatalf("stop order = %v, %v", m, err)
	}
	now := timestamppb.Now()
	for range 2 {
		if err := fw.stream.Send(&pb.AttachRequest{Msg: &pb.AttachRequest_Stopped{Stopped: &pb.HandlerStopped{CallId: b.CallId, StoppedAt: now}}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "stopped_at", func() bool {
		as := e.audits(t, b.CallId)
		return len(as) == 1 && as[0].StoppedAt != nil
	})
	ownersLeft(t, e.cli, "twice", 0)
}

// Regression (found by test/robustness): a call whose Begin committed but
// whose gateway never ran it (the reply was lost, or the gateway died)
// stayed RUNNING forever, and vanished unaudited when its retention lease
// ran out. The janitor now fails a call still running a lease TTL past
// its deadline (its client, if any, was told it could not start); the
// stop order reaches the worker, which never saw the call and clears it.
func TestStrayCallCancelledPastDeadline(t *testing.T) {
	const ttl = time.Second
	e := newEnv(t, envOptions{coord: coordinator.Options{LeaseTTL: ttl}})
	ctx, cancel := context.WithTimeout(t.Context(), 30*ttl) // a call left running fails the test, not the suite
	defer cancel()
	watch, err := e.c.WatchAudit(ctx, &pb.WatchAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: key("conn:gone", num(1)), Tool: "hold", Timeout: durationpb.New(ttl)})
	if err != nil {
		t.Fatal(err)
	}
	// No Execute: the gateway is gone.
	rec, err := watch.Recv()
	if err != nil {
		t.Fatalf("no decision for the stray call: %v", err)
	}
	r := rec.Record
	if r.CallId != b.CallId || r.Outcome != "failed" || r.Initiator != pb.Initiator_INITIATOR_TIMEOUT {
		t.Fatalf("audit = %v, want the stray call failed by timeout", r)
	}
	// Settled a lease TTL after the deadline, on the janitor's next round.
	// The bound only catches a call left running, not a slow round.
	if late := r.SettledAt.AsTime().Sub(b.Deadline.AsTime()); late < ttl || late > 20*ttl {
		t.Fatalf("settled %v after the deadline; want about one lease TTL (%v)", late, ttl)
	}
	testcluster.WaitFor(t, "the worker to clear the stop order", func() bool {
		resp, err := e.cli.Get(t.Context(), prefix+"owners/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	})
	if got := outcomes(e.audits(t, b.CallId)); len(got) != 1 {
		t.Fatalf("audit = %v", got)
	}
}

// A worker killed with many calls in flight: the janitor fails every one
// of them once, as worker_lost, and clears every owner key. It settles
// them side by side, so they share group commits (soak 3 found calls a
// lost worker left settled one after another, seconds late).
func TestWorkerLostFailsManyCalls(t *testing.T) {
	const ttl, calls = time.Second, 100
	e := newEnv(t, envOptions{coord: coordinator.Options{LeaseTTL: ttl}})
	fw := attachFake(t, e.c, "doomed", "ghost")
	begun := map[string]bool{}
	for i := range calls {
		b := e.begin(t, e.c, key("conn:many", num(int64(i))), "ghost")
		begun[b.CallId] = true
	}
	watch, err := e.c.WatchAudit(t.Context(), &pb.WatchAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	fw.kill()
	for range calls {
		rec, err := watch.Recv()
		if err != nil {
			t.Fatal(err)
		}
		r := rec.Record
		if !begun[r.CallId] || r.Outcome != "failed" || r.Initiator != pb.Initiator_INITIATOR_WORKER_LOST {
			t.Fatalf("audit = %v, want a begun call failed as worker_lost", r)
		}
		delete(begun, r.CallId)
	}
	elapsed := time.Since(killed)
	all := auditsFrom(t, e.cli)
	for id, as := range all {
		if len(as) != 1 {
			t.Fatalf("call %s audited %v, want once", id, outcomes(as))
		}
	}
	ownersLeft(t, e.cli, "doomed", 0)
	t.Logf("%d calls failed %v after the kill (TTL %v)", calls, elapsed.Round(time.Millisecond), ttl)
}
