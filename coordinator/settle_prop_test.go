package coordinator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// settleKind is one way to try to decide a call.
type settleKind int

const (
	opComplete  settleKind = iota // the worker's Complete (tool error or not)
	opFail                        // the worker's Fail
	opCancelRef                   // a cancel by reference (the worker: caller gone, deadline)
	opCancelKey                   // a cancel by key (a gateway, for its client)
	numKinds
)

// settleOp is one decision attempt. Each op has its own reason, so two ops
// differ unless one repeats the other (a retry). lose sends it through a
// connection that loses the reply after the coordinator committed, and
// then retries it; repeat sends it again later, as a retry would.
type settleOp struct {
	kind      settleKind
	initiator pb.Initiator
	reason    string
	toolError bool
	stopped   bool // carries stopped_at (the handler has returned)
	lose      bool
	repeat    bool
}

func (o settleOp) String() string {
	return fmt.Sprintf("%v/%v/%s lose=%v repeat=%v stopped=%v", o.kind, o.initiator, o.reason, o.lose, o.repeat, o.stopped)
}

// group is the logical decision an op makes: a worker's completions are
// all one (only it completes, and a second Complete is its own retry);
// every other op is its own.
func (o settleOp) group(i int) string {
	if o.kind == opComplete {
		return "complete"
	}
	return fmt.Sprint(i)
}

func (o settleOp) state() pb.CallState {
	return []pb.CallState{pb.CallState_CALL_STATE_COMPLETED, pb.CallState_CALL_STATE_FAILED,
		pb.CallState_CALL_STATE_CANCELLED, pb.CallState_CALL_STATE_CANCELLED}[o.kind]
}

func drawOp(t *rapid.T, i int) settleOp {
	o := settleOp{
		kind:   settleKind(rapid.IntRange(0, int(numKinds)-1).Draw(t, "kind")),
		reason: fmt.Sprintf("op %d", i),
		lose:   rapid.Bool().Draw(t, "lose"),
		repeat: rapid.Bool().Draw(t, "repeat"),
	}
	pick := func(is ...pb.Initiator) pb.Initiator { return rapid.SampledFrom(is).Draw(t, "initiator") }
	switch o.kind {
	case opComplete:
		o.toolError, o.reason = rapid.Bool().Draw(t, "toolError"), ""
	case opFail:
		o.initiator = pick(pb.Initiator_INITIATOR_TOOL, pb.Initiator_INITIATOR_WORKER_LOST)
		o.stopped = rapid.Bool().Draw(t, "stopped")
	case opCancelRef:
		o.initiator = pick(pb.Initiator_INITIATOR_DISCONNECT, pb.Initiator_INITIATOR_TIMEOUT, pb.Initiator_INITIATOR_SHUTDOWN)
		o.stopped = rapid.Bool().Draw(t, "stopped")
	case opCancelKey:
		o.initiator = pick(pb.Initiator_INITIATOR_CLIENT, pb.Initiator_INITIATOR_TIMEOUT, pb.Initiator_INITIATOR_OPERATOR)
	}
	return o
}

// reply is what one attempt was answered, reduced to what the property
// reads: did it win, and if not, whom did it lose to.
type reply struct {
	won        bool
	lostTo     pb.CallState // with !won
	winner     pb.Initiator
	winnerWhy  string
	wasRetried bool // a retry (after a lost reply, or a repeat)
}

// settleRig sends decisions for one call over a good and a lossy
// connection.
type settleRig struct {
	good, lossy pb.CoordinatorServiceClient
	key         *pb.CallKey
	ref         *pb.CallRef
}

// send makes o's attempt on c.
func (r *settleRig) send(ctx context.Context, c pb.CoordinatorServiceClient, o settleOp) (reply, error) {
	var at *timestamppb.Timestamp
	if o.stopped {
		at = timestamppb.Now()
	}
	lost := func(res pb.SettleResult, who pb.Initiator, why string) reply {
		states := map[pb.SettleResult]pb.CallState{
			pb.SettleResult_SETTLE_RESULT_ALREADY_COMPLETED: pb.CallState_CALL_STATE_COMPLETED,
			pb.SettleResult_SETTLE_RESULT_ALREADY_FAILED:    pb.CallState_CALL_STATE_FAILED,
			pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED: pb.CallState_CALL_STATE_CANCELLED,
		}
		return reply{won: res == pb.SettleResult_SETTLE_RESULT_WON, lostTo: states[res], winner: who, winnerWhy: why}
	}
	switch o.kind {
	case opComplete:
		resp, err := c.Complete(ctx, &pb.CompleteRequest{Call: r.ref, ToolError: o.toolError, StoppedAt: timestamppb.Now()})
		return lost(resp.GetResult(), resp.GetWinnerInitiator(), resp.GetWinnerReason()), err
	case opFail:
		resp, err := c.Fail(ctx, &pb.FailRequest{Call: r.ref, Initiator: o.initiator, Reason: o.reason, StoppedAt: at})
		return lost(resp.GetResult(), resp.GetWinnerInitiator(), resp.GetWinnerReason()), err
	}
	req := &pb.CancelRequest{Initiator: o.initiator, Reason: o.reason, StoppedAt: at}
	if o.kind == opCancelRef {
		req.Target = &pb.CancelRequest_Call{Call: r.ref}
	} else {
		req.Target, req.StoppedAt = &pb.CancelRequest_Key{Key: r.key}, nil
	}
	resp, err := c.Cancel(ctx, req)
	states := map[pb.CancelResult]pb.CallState{
		pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED: pb.CallState_CALL_STATE_COMPLETED,
		pb.CancelResult_CANCEL_RESULT_ALREADY_FAILED:    pb.CallState_CALL_STATE_FAILED,
		pb.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED: pb.CallState_CALL_STATE_CANCELLED,
	}
	return reply{won: resp.GetResult() == pb.CancelResult_CANCEL_RESULT_CANCELLED, lostTo: states[resp.GetResult()],
		winner: resp.GetWinnerInitiator(), winnerWhy: resp.GetWinnerReason()}, err
}

// attempt makes o's first attempt: through the lossy connection (its
// reply is lost after the commit) and then again, or once.
func (r *settleRig) attempt(ctx context.Context, o settleOp) (reply, error) {
	if !o.lose {
		return r.send(ctx, r.good, o)
	}
	if _, err := r.send(ctx, r.lossy, o); status.Code(err) != codes.Unavailable {
		return reply{}, fmt.Errorf("the lossy attempt: %v, want its reply lost", err)
	}
	rep, err := r.send(ctx, r.good, o)
	rep.wasRetried = true
	return rep, err
}

// loseReplies is a client interceptor that loses every reply after the
// call committed, as a connection cut at that moment would.
func loseReplies(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if err := invoke(ctx, m, req, reply, cc, opts...); err != nil {
		return err
	}
	return status.Error(codes.Unavailable, "error reading from server: EOF")
}

// TestSettleProperties drives one call per case through a random
// interleaving of Complete, Fail and Cancel (by reference and by key),
// sent one after another or all at once, some with their replies lost
// after the commit and retried, some repeated later, against a real
// coordinator, worker and etcd. Whatever the order:
//   - exactly one decision wins, and the record holds it;
//   - the record's state never moves once decided;
//   - every attempt of the winning decision, retries included, is told it
//     won (a gateway's repeated cancel by key, which is not its owner's, is
//     told ALREADY_CANCELLED naming itself);
//   - every other attempt is told it lost to the winner's state, naming
//     the winner's initiator and reason;
//   - the audit holds exactly one decision record, plus one cancel_lost
//     iff a client's cancel came after another outcome;
//   - the handler's stop is reported: the owner key goes and the decision
//     record gets its stopped_at.
func TestSettleProperties(t *testing.T) {
	e := newEnv(t, envOptions{})
	conn, err := grpc.NewClient(e.coords[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(loseReplies))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	lossy := pb.NewCoordinatorServiceClient(conn)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		k := key(fmt.Sprintf("conn:prop-%d", n), num(1))
		b := e.begin(t, e.c, k, "hold")
		rig := &settleRig{good: e.c, lossy: lossy, key: k, ref: &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker}}
		ops := rapid.Custom(func(rt *rapid.T) []settleOp {
			n := rapid.IntRange(1, 5).Draw(rt, "n")
			var ops []settleOp
			for i := range n {
				ops = append(ops, drawOp(rt, i))
			}
			return ops
		}).Draw(rt, "ops")
		together := rapid.Bool().Draw(rt, "together")

		replies := make([][]reply, len(ops))
		var decided *pb.Call
		watch := func(after string) { // the record never moves once decided
			got, err := e.c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: b.CallId}})
			if err != nil {
				rt.Fatalf("GetCall after %s: %v", after, err)
			}
			c := got.GetCall()
			switch {
			case decided == nil && c.GetState() != pb.CallState_CALL_STATE_RUNNING:
				decided = c
			case decided != nil && !proto.Equal(decided, c):
				rt.Fatalf("after %s the record moved from %v to %v", after, decided, c)
			}
		}
		if together {
			var wg sync.WaitGroup
			errs := make([]error, len(ops))
			for i, o := range ops {
				wg.Go(func() {
					var rep reply
					rep, errs[i] = rig.attempt(t.Context(), o)
					replies[i] = append(replies[i], rep)
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					rt.Fatalf("op %d (%v): %v", i, ops[i], err)
				}
			}
			watch("the concurrent attempts")
		} else {
			for i, o := range ops {
				rep, err := rig.attempt(t.Context(), o)
				if err != nil {
					rt.Fatalf("op %d (%v): %v", i, o, err)
				}
				replies[i] = append(replies[i], rep)
				watch(fmt.Sprintf("op %d (%v)", i, o))
			}
		}
		for i, o := range ops {
			if !o.repeat {
				continue
			}
			rep, err := rig.send(t.Context(), e.c, o)
			if err != nil {
				rt.Fatalf("repeat of op %d (%v): %v", i, o, err)
			}
			rep.wasRetried = true
			replies[i] = append(replies[i], rep)
			watch(fmt.Sprintf("the repeat of op %d (%v)", i, o))
		}
		checkSettle(rt, ops, replies, decided)
		checkSettleAudit(rt, e, b.CallId, ops, replies, decided)
	})
}

// ownEcho says whether r is a retried cancel by key told that the call
// was already cancelled by that very cancel: reasons are unique per op, so
// naming its own reason means its first attempt won.
func ownEcho(o settleOp, r reply) bool {
	return o.kind == opCancelKey && r.wasRetried && !r.won && r.lostTo == pb.CallState_CALL_STATE_CANCELLED &&
		r.winner == o.initiator && r.winnerWhy == o.reason
}

// checkSettle asserts the replies' properties against the decided record.
func checkSettle(rt *rapid.T, ops []settleOp, replies [][]reply, decided *pb.Call) {
	winners := map[string]bool{}
	win := -1
	for i, reps := range replies {
		for _, r := range reps {
			if r.won || ownEcho(ops[i], r) {
				winners[ops[i].group(i)] = true
				if win < 0 {
					win = i
				}
			}
		}
	}
	if len(winners) != 1 {
		rt.Fatalf("%d decisions won (%v), want exactly one", len(winners), winners)
	}
	if decided == nil {
		rt.Fatalf("a decision won but the record is still running")
	}
	w := ops[win]
	if decided.GetState() != w.state() || decided.GetInitiator() != w.initiator || decided.GetReason() != w.reason {
		rt.Fatalf("record = %v/%v/%q, want the winner's %v/%v/%q", decided.GetState(), decided.GetInitiator(), decided.GetReason(), w.state(), w.initiator, w.reason)
	}
	for i, reps := range replies {
		for j, r := range reps {
			o := ops[i]
			switch {
			case o.group(i) == w.group(win) && o.kind == opCancelKey && r.wasRetried:
				// A gateway's retried cancel is not recognised as its own:
				// it lost to the cancellation it made, which it names.
				if !ownEcho(o, r) {
					rt.Fatalf("repeat of the winning cancel by key (%v) = %+v, want ALREADY_CANCELLED naming itself", o, r)
				}
			case o.group(i) == w.group(win):
				if !r.won {
					rt.Fatalf("attempt %d of the winner's decision (op %d, %v) = %+v, want won", j, i, o, r)
				}
			default:
				wantWho, wantWhy := w.initiator, w.reason
				if r.won || r.lostTo != decided.GetState() || r.winner != wantWho || r.winnerWhy != wantWhy {
					rt.Fatalf("loser op %d (%v) attempt %d = %+v, want lost to %v by %v %q", i, o, j, r, decided.GetState(), wantWho, wantWhy)
				}
			}
		}
	}
}

// checkSettleAudit asserts one decision record (with the handler's stop
// once reported) and at most the one cancel_lost.
func checkSettleAudit(rt *rapid.T, e *env, callID string, ops []settleOp, replies [][]reply, decided *pb.Call) {
	wantLost := 0
	if decided.GetState() != pb.CallState_CALL_STATE_CANCELLED {
		for i, o := range ops {
			if o.kind == opCancelKey && !replies[i][0].won {
				wantLost = 1
			}
		}
	}
	var recs []*pb.AuditRecord
	ok := pollFor(func() bool {
		resp, err := e.c.ListAudit(context.Background(), &pb.ListAuditRequest{CallId: callID})
		if err != nil {
			return false
		}
		recs = resp.GetRecords()
		for _, r := range recs {
			if r.GetOutcome() != "cancel_lost" && r.GetStoppedAt() == nil {
				return false
			}
		}
		return len(recs) == 1+wantLost
	})
	if !ok {
		rt.Fatalf("audit of %v = %v, want one decision with its stop, and %d cancel_lost", decided.GetState(), recs, wantLost)
	}
	decisions, lost := 0, 0
	for _, r := range recs {
		switch r.GetOutcome() {
		case "cancel_lost":
			lost++
		case "completed", "tool_error", "failed", "cancelled":
			decisions++
		}
	}
	if decisions != 1 || lost != wantLost {
		rt.Fatalf("audit: %d decisions and %d cancel_lost, want 1 and %d", decisions, lost, wantLost)
	}
	owner := prefix + "owners/" + decided.GetWorker() + "/" + callID
	if !pollFor(func() bool {
		resp, err := e.cli.Get(context.Background(), owner)
		return err == nil && len(resp.Kvs) == 0
	}) {
		rt.Fatalf("owner key %s outlived the handler's stop report", owner)
	}
}

// pollFor polls cond every few milliseconds for up to ten seconds, as
// testcluster.WaitFor does, and says whether it came true.
func pollFor(cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
