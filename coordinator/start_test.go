package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/randid"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

func startReq(k *pb.CallKey, tool string) *pb.BeginRequest {
	return &pb.BeginRequest{Key: k, Tool: tool, Principal: "alice", Gateway: "g1", BeginId: randid.New(16)}
}

// startPlaced opens a Start and reads its first message, the placement.
func startPlaced(t *testing.T, c pb.CoordinatorServiceClient, k *pb.CallKey, tool string) (grpc.ServerStreamingClient[pb.StartResponse], *pb.BeginResponse) {
	t.Helper()
	st, err := c.Start(t.Context(), &pb.StartRequest{Begin: startReq(k, tool)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return st, m.GetPlaced()
}

func placementRef(p *pb.BeginResponse) *pb.CallRef {
	return &pb.CallRef{CallId: p.CallId, Worker: p.Worker, Placement: p.Placement}
}

// callKeys lists the keys under calls/, index/, running/ and audit/ that
// name callID or the request's index, as etcd holds them now.
func recordKeys(t *testing.T, e *env, callID string) (calls, audits, running int) {
	t.Helper()
	for k := range etcdKeys(t, e.cli) {
		switch {
		case strings.Contains(k, "calls/"+callID):
			calls++
		case strings.Contains(k, "/audit/") && strings.Contains(k, callID):
			audits++
		case strings.Contains(k, "/running/"):
			running++
		}
	}
	return calls, audits, running
}

// A decision that comes before its call's Begin (here a gateway's Fail
// through another replica, made while the Begin waits) creates the record
// already settled, with its index and one audit record; the Begin then
// finds it, writes nothing, and succeeds, saying so.
func TestDecisionBeforeBeginCreatesTheRecord(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2})
	b := e.coords[1].Client(t)
	waitTools(t, b, "hold")
	k := key("conn:created", num(1))
	var placed *pb.BeginResponse
	var afterDecision int64
	last, err := e.coords[0].Server.StartPaused(t.Context(), startReq(k, "hold"), func(p *pb.BeginResponse) {
		placed = p
		if p.Fence != 0 || len(p.Placement) == 0 {
			t.Errorf("placed = fence %d, %d bytes of placement; want the call placed beside its work", p.Fence, len(p.Placement))
			return
		}
		got, err := b.Fail(t.Context(), &pb.FailRequest{Call: placementRef(p), Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "gateway lost"})
		if err != nil {
			t.Errorf("fail by placement: %v", err)
			return
		}
		if got.Result != pb.SettleResult_SETTLE_RESULT_WON {
			t.Errorf("fail by placement = %v, want WON", got.Result)
		}
		afterDecision = e.revision(t)
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if bg := last.GetBegun(); bg == nil || !bg.Settled {
		t.Fatalf("start ended with %v, want Begun settled", last)
	}
	if rev := e.revision(t); rev != afterDecision {
		t.Fatalf("the Begin wrote to etcd (revision %d after the decision, %d after Start)", afterDecision, rev)
	}
	if s := e.state(t, placed.CallId); s != pb.CallState_CALL_STATE_FAILED {
		t.Fatalf("state = %v, want FAILED", s)
	}
	if got := outcomes(e.audits(t, placed.CallId)); len(got) != 1 || got[0] != "failed" {
		t.Fatalf("audit = %v, want one failed", got)
	}
	calls, _, running := recordKeys(t, e, placed.CallId)
	if calls != 1 || running != 0 {
		t.Fatalf("calls/ keys %d, running/ keys %d; want 1 and 0", calls, running)
	}
	// The index holds the call as settled: a cancel by key finds it
	// failed, never running, and the request id is free again.
	if r := e.cancel(t, b, k, "late"); r != pb.CancelResult_CANCEL_RESULT_ALREADY_FAILED {
		t.Fatalf("cancel by key = %v, want ALREADY_FAILED", r)
	}
	if s := e.state(t, placed.CallId); s != pb.CallState_CALL_STATE_FAILED {
		t.Fatalf("after a late cancel, state = %v, want FAILED", s)
	}
	again := e.begin(t, e.c, k, "hold")
	if again.CallId == placed.CallId {
		t.Fatal("the key's next call reused the failed call's id")
	}
}

// A worker completes a call it ran before the call's record was durable,
// many times over: whichever of the Begin (through replica a) and the
// completion (through b, the worker's) reaches etcd first, the call is
// COMPLETED once, audited once, and not running.
func TestCompletionRacesBegin(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2, workerTo: []int{1}})
	var first, later int
	for i := range 40 {
		k := key("conn:race-begin", num(int64(i)))
		st, p := startPlaced(t, e.c, k, "echo")
		if p.GetFence() != 0 {
			t.Fatalf("placed with fence %d, want 0 (beside the work)", p.GetFence())
		}
		ex, err := e.wc.Execute(t.Context(), &pb.ExecuteRequest{CallId: p.CallId, Placement: p.Placement, Worker: p.Worker,
			Tool: "echo", ArgumentsJson: []byte(`{"text":"hi"}`), Deadline: p.Deadline})
		if err != nil {
			t.Fatal(err)
		}
		fin := (&execStream{stream: ex}).final(t)
		if fin.GetResult() == nil {
			t.Fatalf("call %d ended with %v, want its result", i, fin)
		}
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("start's second message: %v", err)
		}
		if m.GetBegun().GetSettled() {
			later++
		} else {
			first++
		}
		if _, err := st.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("start after Begun: %v, want its end", err)
		}
		if s := e.state(t, p.CallId); s != pb.CallState_CALL_STATE_COMPLETED {
			t.Fatalf("call %d state = %v, want COMPLETED", i, s)
		}
		if got := outcomes(e.audits(t, p.CallId)); len(got) != 1 || got[0] != "completed" {
			t.Fatalf("call %d audit = %v, want one completed", i, got)
		}
	}
	if _, _, running := recordKeys(t, e, ""); running != 0 {
		t.Fatalf("%d running/ keys left", running)
	}
	t.Logf("begun first %d, completed first %d", first, later)
}

// A client's cancel that reaches another replica while the call's record
// is being written waits for the record, and wins.
func TestCancelBeforeTheRecordWaitsForIt(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2})
	b := e.coords[1].Client(t)
	k := key("conn:await", num(1))
	done := make(chan *pb.CancelResponse, 1)
	errc := make(chan error, 1)
	last, err := e.coords[0].Server.StartPaused(t.Context(), startReq(k, "hold"), func(*pb.BeginResponse) {
		go func() {
			got, err := b.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: k},
				Initiator: pb.Initiator_INITIATOR_CLIENT, Principal: "alice", AwaitRecord: true})
			errc <- err
			done <- got
		}()
	})
	if err != nil || last.GetBegun() == nil {
		t.Fatalf("start: %v, %v", last, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.Result != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel = %v, want CANCELLED", got.Result)
	}
	if got := outcomes(e.audits(t, got.CallId)); len(got) != 1 || got[0] != "cancelled" {
		t.Fatalf("audit = %v, want one cancelled", got)
	}
}

// A bogus cancel that waits for a record writes nothing and says UNKNOWN.
func TestBogusCancelAwaitingARecordWritesNothing(t *testing.T) {
	e := newEnv(t, envOptions{coord: coordinator.Options{OpTimeout: time.Second}})
	before := e.revision(t)
	start := time.Now()
	got, err := e.c.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Key{Key: key("conn:bogus", num(9))},
		Initiator: pb.Initiator_INITIATOR_CLIENT, AwaitRecord: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Result != pb.CancelResult_CANCEL_RESULT_UNKNOWN {
		t.Fatalf("cancel = %v, want UNKNOWN", got.Result)
	}
	if rev := e.revision(t); rev != before {
		t.Fatalf("a bogus cancel moved etcd from revision %d to %d", before, rev)
	}
	t.Logf("answered after %v", time.Since(start).Round(time.Millisecond))
}

// A gateway that gave up on a Start abandons its Begin before the Begin
// reaches etcd: the Begin commits nothing, and the worker's completion,
// which would create the record, is refused. The call has no record; it
// showed nothing to anyone.
func TestAbandonedPlacementIsNeverRecorded(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2})
	b := e.coords[1].Client(t)
	k := key("conn:abandon-placed", num(1))
	req := startReq(k, "hold")
	var placed *pb.BeginResponse
	_, err := e.coords[0].Server.StartPaused(t.Context(), req, func(p *pb.BeginResponse) {
		placed = p
		got, err := b.AbandonBegin(t.Context(), abandonReq(k, req.BeginId))
		if err != nil || got.Begun {
			t.Errorf("abandon = %v, %v; want not begun", got, err)
		}
	})
	if !errors.Is(err, coordinator.ErrAbandoned) {
		t.Fatalf("start: %v, want the Begin abandoned", err)
	}
	_, err = b.Complete(t.Context(), &pb.CompleteRequest{Call: placementRef(placed)})
	if !client.Is(err, client.ErrUnknownCall) {
		t.Fatalf("complete by placement: %v, want UNKNOWN_CALL", err)
	}
	if calls, audits, _ := recordKeys(t, e, placed.CallId); calls != 0 || audits != 0 {
		t.Fatalf("calls/ keys %d, audit keys %d; want none", calls, audits)
	}
}

// A placement is a coordinator's: one that names another call, or is not
// one at all, is refused.
func TestPlacementIsChecked(t *testing.T) {
	e := newEnv(t, envOptions{})
	_, p := startPlaced(t, e.c, key("conn:checked", num(1)), "hold")
	for name, ref := range map[string]*pb.CallRef{
		"garbage":        {CallId: p.CallId, Worker: p.Worker, Placement: []byte("{")},
		"another call":   {CallId: randid.New(16), Worker: p.Worker, Placement: p.Placement},
		"another worker": {CallId: p.CallId, Worker: "w2", Placement: p.Placement},
	} {
		if _, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: ref}); !client.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	for name, req := range map[string]*pb.BeginRequest{
		"no begin_id": {Key: key("conn:checked", num(2)), Tool: "hold"},
		"a retry":     {Key: key("conn:checked", num(3)), Tool: "hold", BeginId: randid.New(16), RetryOf: randid.New(16)},
	} {
		st, err := e.c.Start(t.Context(), &pb.StartRequest{Begin: req})
		if err == nil {
			_, err = st.Recv() // a server stream reports its error here
		}
		if !client.Is(err, client.ErrInvalidArgument) {
			t.Errorf("start with %s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}

// The worker runs the call and completes it while the Begin waits: its
// completion (through replica b, the worker's) creates the record,
// COMPLETED, guarded by the worker's key; the Begin then writes nothing.
func TestCompletionBeforeBeginCreatesTheRecord(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2, workerTo: []int{1}})
	k := key("conn:completed-first", num(1))
	var placed *pb.BeginResponse
	last, err := e.coords[0].Server.StartPaused(t.Context(), startReq(k, "echo"), func(p *pb.BeginResponse) {
		placed = p
		ex, err := e.wc.Execute(t.Context(), &pb.ExecuteRequest{CallId: p.CallId, Placement: p.Placement, Worker: p.Worker,
			Tool: "echo", ArgumentsJson: []byte(`{"text":"first"}`), Deadline: p.Deadline})
		if err != nil {
			t.Error(err)
			return
		}
		if fin := (&execStream{stream: ex}).final(t); fin.GetResult() == nil {
			t.Errorf("the call ended with %v, want its result", fin)
		}
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if !last.GetBegun().GetSettled() {
		t.Fatalf("start ended with %v, want Begun settled", last)
	}
	if s := e.state(t, placed.CallId); s != pb.CallState_CALL_STATE_COMPLETED {
		t.Fatalf("state = %v, want COMPLETED", s)
	}
	if got := outcomes(e.audits(t, placed.CallId)); len(got) != 1 || got[0] != "completed" {
		t.Fatalf("audit = %v, want one completed", got)
	}
	if calls, _, running := recordKeys(t, e, placed.CallId); calls != 1 || running != 0 {
		t.Fatalf("calls/ keys %d, running/ keys %d; want 1 and 0", calls, running)
	}
}

// GetCallStates reads many calls' states at once, in order: running,
// decided, or UNSPECIFIED for an id with no record; it bounds its input.
func TestGetCallStates(t *testing.T) {
	e := newEnv(t, envOptions{})
	running := e.begin(t, e.c, key("conn:states", num(1)), "hold")
	cancelled := e.begin(t, e.c, key("conn:states", num(2)), "hold")
	if r := e.cancel(t, e.c, key("conn:states", num(2)), "done"); r != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel = %v", r)
	}
	got, err := e.c.GetCallStates(t.Context(), &pb.GetCallStatesRequest{CallIds: []string{running.CallId, randid.New(16), cancelled.CallId}})
	if err != nil {
		t.Fatal(err)
	}
	want := []pb.CallState{pb.CallState_CALL_STATE_RUNNING, pb.CallState_CALL_STATE_UNSPECIFIED, pb.CallState_CALL_STATE_CANCELLED}
	if fmt.Sprint(got.States) != fmt.Sprint(want) {
		t.Fatalf("states = %v, want %v", got.States, want)
	}
	many := make([]string, 300) // more than one Txn's worth
	for i := range many {
		many[i] = randid.New(16)
	}
	many[299] = running.CallId
	if got, err := e.c.GetCallStates(t.Context(), &pb.GetCallStatesRequest{CallIds: many}); err != nil || len(got.States) != 300 || got.States[299] != pb.CallState_CALL_STATE_RUNNING {
		t.Fatalf("300 ids: %v, %v", got, err)
	}
	for name, ids := range map[string][]string{"too many": make([]string, 1025), "not an id": {"x"}} {
		if name == "too many" {
			for i := range ids {
				ids[i] = randid.New(16)
			}
		}
		if _, err := e.c.GetCallStates(t.Context(), &pb.GetCallStatesRequest{CallIds: ids}); !client.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}

// A session closed while its call ran before its record (a 2025 session
// deleted): the Begin is refused, and the gateway's decision by placement
// records the call as the close would have had it been begun, cancelled
// by the disconnect with the close's reason; the gateway's Fail loses to
// that.
func TestSessionClosedBeforeTheRecord(t *testing.T) {
	e := newEnv(t, envOptions{})
	const sid = "9f0e2d7c1b3a4f5e"
	if _, err := e.c.OpenSession(t.Context(), &pb.OpenSessionRequest{Session: &pb.Session{SessionId: sid, Principal: "alice"}}); err != nil {
		t.Fatal(err)
	}
	k := key("session:"+sid, num(1))
	var placed *pb.BeginResponse
	_, err := e.coords[0].Server.StartPaused(t.Context(), startReq(k, "hold"), func(p *pb.BeginResponse) {
		placed = p
		if _, err := e.c.CloseSession(t.Context(), &pb.CloseSessionRequest{SessionId: sid, Principal: "alice", Reason: "session deleted by the client"}); err != nil {
			t.Error(err)
		}
	})
	if !errors.Is(err, coordinator.ErrSessionClosed) {
		t.Fatalf("start: %v, want the session closed", err)
	}
	got, err := e.c.Fail(t.Context(), &pb.FailRequest{Call: placementRef(placed), Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "could not confirm the record"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Result != pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED || got.WinnerInitiator != pb.Initiator_INITIATOR_DISCONNECT || got.WinnerReason != "session deleted by the client" {
		t.Fatalf("fail = %v, want ALREADY_CANCELLED by the disconnect", got)
	}
	as := e.audits(t, placed.CallId)
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Initiator != "disconnect" || as[0].Reason != "session deleted by the client" {
		t.Fatalf("audit = %+v, want one cancelled by the disconnect", as)
	}
}

// A decision by placement that comes after its call's deadline (and the
// lease TTL) creates nothing: by then what guards the creation may have
// expired (here the record and its index, deleted as retention would),
// and the call would be recorded a second time.
func TestNoRecordCreatedPastTheDeadline(t *testing.T) {
	var ahead atomic.Int64 // how far the coordinator's clock runs ahead
	e := newEnv(t, envOptions{replicas: 2, coord: coordinator.Options{LeaseTTL: time.Second,
		Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }}})
	b := e.coords[1].Client(t)
	k := key("conn:late", num(1))
	req := startReq(k, "hold")
	req.Timeout = durationpb.New(2 * time.Second)
	var placed *pb.BeginResponse
	_, err := e.coords[0].Server.StartPaused(t.Context(), req, func(p *pb.BeginResponse) {
		placed = p
		if _, err := b.Fail(t.Context(), &pb.FailRequest{Call: placementRef(p), Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "gateway lost"}); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"calls/" + placed.CallId, "index/conn:late/n:1"} {
		if _, err := e.cli.Delete(t.Context(), prefix+kv); err != nil {
			t.Fatal(err)
		}
	}
	ahead.Store(int64(4 * time.Second)) // past the deadline and the TTL
	_, err = b.Complete(t.Context(), &pb.CompleteRequest{Call: placementRef(placed)})
	if !client.Is(err, client.ErrUnknownCall) {
		t.Fatalf("a completion by placement past the deadline: %v, want UNKNOWN_CALL", err)
	}
	if calls, _, _ := recordKeys(t, e, placed.CallId); calls != 0 {
		t.Fatal("the call was recorded again")
	}
}

// A tool marked durable_begin is begun first: Start answers once, with
// the fence, after the record is durable, and sends no second message.
func TestDurableBeginToolIsRecordedFirst(t *testing.T) {
	e := newEnv(t, envOptions{})
	testcluster.StartWorker(t, worker.Options{Coordinator: e.coords[0].Addr, Name: "w-durable"}, func(w *worker.Worker) {
		w.Handle(worker.Tool{Name: "charge", DurableBegin: true}, func(context.Context, *worker.Call) (*worker.Result, error) {
			return worker.Text("charged"), nil
		})
	})
	waitTools(t, e.c, "charge")
	st, p := startPlaced(t, e.c, key("conn:durable", num(1)), "charge")
	if p.GetFence() == 0 || len(p.GetPlacement()) != 0 {
		t.Fatalf("placed with fence %d and %d bytes of placement, want the record first", p.GetFence(), len(p.GetPlacement()))
	}
	if s := e.state(t, p.CallId); s != pb.CallState_CALL_STATE_RUNNING {
		t.Fatalf("state when placed = %v, want RUNNING", s)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("start after the placement: %v, want its end", err)
	}
	// The hold tool, on the worker that runs calls placed, starts beside.
	if _, p := startPlaced(t, e.c, key("conn:durable", num(2)), "hold"); p.GetFence() != 0 {
		t.Fatalf("hold placed with fence %d, want 0 (beside the work)", p.GetFence())
	}
}

// A quick call costs one commit: its Begin lingers (here for up to 2 s,
// Options.BeginLinger), the worker's completion comes meanwhile and
// writes the record already completed, and the Begin, finding it, writes
// nothing. A gateway's cancel of a call in the window does the same,
// cancelled. Each call is recorded once, as decided.
func TestQuickCallTakesOneCommit(t *testing.T) {
	e := newEnv(t, envOptions{coord: coordinator.Options{BeginLinger: 2 * time.Second}})
	for i := range 10 {
		before, txnsBefore, deletesBefore := e.revision(t), commitTxns(t, e), etcdDeletes(t, e)
		st, p := startPlaced(t, e.c, key("conn:quick", num(int64(i))), "echo")
		ex, err := e.wc.Execute(t.Context(), &pb.ExecuteRequest{CallId: p.CallId, Placement: p.Placement, Worker: p.Worker,
			Tool: "echo", ArgumentsJson: []byte(`{"text":"hi"}`), Deadline: p.Deadline})
		if err != nil {
			t.Fatal(err)
		}
		if fin := (&execStream{stream: ex}).final(t); fin.GetResult() == nil {
			t.Fatalf("call %d ended with %v, want its result", i, fin)
		}
		m, err := st.Recv()
		if err != nil || !m.GetBegun().GetSettled() {
			t.Fatalf("call %d: start's second message %v (%v), want Begun settled", i, m, err)
		}
		if got := e.revision(t) - before; got != 1 {
			t.Fatalf("call %d took %d commits, want 1", i, got)
		}
		if got := commitTxns(t, e) - txnsBefore; got != 1 { // the Begin went nowhere
			t.Fatalf("call %d sent %v Txns to etcd, want 1", i, got)
		}
		if got := etcdDeletes(t, e) - deletesBefore; got != 0 { // no Begin wrote anything to clear
			t.Fatalf("call %d asked etcd for %v deletes, want none", i, got)
		}
		if got := outcomes(e.audits(t, p.CallId)); len(got) != 1 || got[0] != "completed" {
			t.Fatalf("call %d audit = %v, want one completed", i, got)
		}
	}

	before := e.revision(t)
	st, p := startPlaced(t, e.c, key("conn:quick", num(100)), "hold")
	got, err := e.c.Cancel(t.Context(), &pb.CancelRequest{Target: &pb.CancelRequest_Call{Call: placementRef(p)},
		Initiator: pb.Initiator_INITIATOR_CLIENT, Reason: "changed my mind"})
	if err != nil || got.Result != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel by placement = %v, %v; want CANCELLED", got, err)
	}
	if m, err := st.Recv(); err != nil || !m.GetBegun().GetSettled() {
		t.Fatalf("start's second message %v (%v), want Begun settled", m, err)
	}
	if n := e.revision(t) - before; n != 1 {
		t.Fatalf("the cancelled call took %d commits, want 1", n)
	}
	if got := outcomes(e.audits(t, p.CallId)); len(got) != 1 || got[0] != "cancelled" {
		t.Fatalf("audit = %v, want one cancelled", got)
	}
}
