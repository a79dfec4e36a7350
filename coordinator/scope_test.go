package coordinator_test

import (
	"slices"
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/worker"
)

// Cancelling a scope cancels its running calls, in batches, and says
// which: not the ones that completed first, and nothing in another scope.
func TestCancelScope(t *testing.T) {
	const n, done = 100, 10 // more than two batches
	e := newEnv(t, envOptions{})
	type call struct {
		b *pb.BeginResponse
		s *execStream
		h *held
	}
	var calls []call
	for i := range n {
		b := e.begin(t, e.c, key("conn:storm", num(int64(i))), "hold")
		s := e.execute(t, b, "hold", `{}`)
		calls = append(calls, call{b, s, e.hold.next(t)})
	}
	other := e.begin(t, e.c, key("conn:other", num(0)), "hold")
	otherStream := e.execute(t, other, "hold", `{}`)
	otherHeld := e.hold.next(t)
	for _, c := range calls[:done] {
		c.h.release <- worker.Text("ok")
		if ev := c.s.final(t); ev.GetResult() == nil {
			t.Fatalf("released call ended with %v", ev)
		}
	}

	resp, err := e.c.CancelScope(t.Context(), &pb.CancelScopeRequest{
		Scope: "conn:storm", Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "gone",
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, c := range calls[done:] {
		want = append(want, c.b.CallId)
	}
	got := slices.Sorted(slices.Values(resp.CallIds))
	if slices.Sort(want); resp.Cancelled != n-done || !slices.Equal(got, want) {
		t.Fatalf("cancelled %d calls %v, want the %d still running", resp.Cancelled, got, n-done)
	}
	all := auditsFrom(t, e.cli)
	for i, c := range calls {
		wantOutcome := "cancelled"
		if i < done {
			wantOutcome = "completed"
		} else {
			waitDone(t, c.h)
			if ev := c.s.final(t); ev.GetCancelled() == nil {
				t.Fatalf("call %d ended with %v, want cancelled", i, ev)
			}
		}
		if o := outcomes(all[c.b.CallId]); len(o) != 1 || o[0] != wantOutcome {
			t.Fatalf("call %d audit = %v, want [%s]", i, o, wantOutcome)
		}
	}
	if otherHeld.ctx.Err() != nil || e.state(t, other.CallId) != pb.CallState_CALL_STATE_RUNNING {
		t.Fatal("a call in another scope was disturbed")
	}
	otherHeld.release <- worker.Text("ok")
	otherStream.final(t)
}
