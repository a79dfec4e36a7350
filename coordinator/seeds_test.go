package coordinator_test

import (
	"testing"

	"strings"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/worker"
)

// Seed (a): a cancel while the handler runs wins. The handler's context is
// done, its late result never leaves the worker, a late Complete loses, and
// exactly one audit record says cancelled.
func TestCancelWhileRunning(t *testing.T) {
	e := newEnv(t, envOptions{stubborn: true})
	k := key("conn:a", num(1))
	b := e.begin(t, e.c, k, "hold")
	s := e.execute(t, b, "hold", `{}`)
	h := e.hold.next(t)

	if got := e.cancel(t, e.c, k, "user pressed stop"); got != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel = %v, want CANCELLED", got)
	}
	waitDone(t, h)
	h.release <- worker.Text("too late") // a stubborn handler returns a result anyway
	if ev := s.final(t); ev.GetCancelled() == nil {
		t.Fatalf("final event = %v, want cancelled (no result may leave the worker)", ev)
	}
	late, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker}})
	if err != nil {
		t.Fatal(err)
	}
	if late.Result != pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED {
		t.Fatalf("late complete = %v, want ALREADY_CANCELLED", late.Result)
	}
	if st := e.state(t, b.CallId); st != pb.CallState_CALL_STATE_CANCELLED {
		t.Fatalf("state = %v", st)
	}
	as := e.audits(t, b.CallId)
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].Initiator != "client" || as[0].Reason != "user pressed stop" {
		t.Fatalf("audit = %+v, want one cancelled record by the client", outcomes(as))
	}
	// The worker reports when the handler really returned; the audit
	// gets stopped_at and the owner key goes.
	waitFor(t, "stopped_at", func() bool {
		as := e.audits(t, b.CallId)
		return len(as) == 1 && as[0].StoppedAt != nil && !as[0].StoppedAt.Before(as[0].SettledAt)
	})
	ownersLeft(t, e.cli, "w1", 0)
	if string(as[0].RequestID) != "1" || as[0].Scope != "conn:a" || as[0].Principal != "alice" || as[0].Worker != "w1" {
		t.Fatalf("audit fields wrong: %+v", as[0])
	}
}

// Seed (b): completion just before the cancel. The result goes out, the
// cancel says ALREADY_COMPLETED, and no cancelled record exists; the late
// cancel is recorded once as cancel_lost.
func TestCompletionBeforeCancel(t *testing.T) {
	e := newEnv(t, envOptions{})
	k := key("conn:a", text("req-1"))
	b := e.begin(t, e.c, k, "echo")
	ev := e.execute(t, b, "echo", `{"text":"hello"}`).final(t)
	if ev.GetResult() == nil || !strings.Contains(string(ev.GetResult().ResultJson), "hello") {
		t.Fatalf("final = %v, want the result", ev)
	}
	for range 2 {
		if got := e.cancel(t, e.c, k, "too slow"); got != pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED {
			t.Fatalf("cancel = %v, want ALREADY_COMPLETED", got)
		}
	}
	as := e.audits(t, b.CallId)
	got := outcomes(as)
	if len(got) != 2 || got[0] != "completed" || got[1] != "cancel_lost" {
		t.Fatalf("audit outcomes = %v, want [completed cancel_lost]", got)
	}
	if as[0].StoppedAt == nil {
		t.Fatal("completed record has no stopped_at")
	}
}

// Seed (c): cancellations that name nothing the caller may touch write
// nothing. A completed call's late cancel writes its one cancel_lost record
// the first time (docs/design.md §7) and nothing after.
func TestCancelWritesNothingWhenItFindsNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	k := key("session:s1", num(7))
	b := e.begin(t, e.c, k, "hold")
	s := e.execute(t, b, "hold", `{}`)
	h := e.hold.next(t)

	cases := []struct {
		name string
		key  *pb.CallKey
	}{
		{"unknown id", key("session:s1", num(8))},
		{"string id for integer call", key("session:s1", text("7"))},
		{"other scope", key("session:s2", num(7))},
		{"other kind of scope", key("conn:s1", num(7))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := e.revision(t)
			if got := e.cancel(t, e.c, tc.key, "x"); got != pb.CancelResult_CANCEL_RESULT_UNKNOWN {
				t.Fatalf("cancel = %v, want UNKNOWN", got)
			}
			if after := e.revision(t); after != before {
				t.Fatalf("etcd revision moved %d -> %d", before, after)
			}
		})
	}
	t.Run("other principal", func(t *testing.T) {
		before := e.revision(t)
		resp, err := e.c.Cancel(t.Context(), &pb.CancelRequest{
			Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_CLIENT, Principal: "mallory",
		})
		if err != nil || resp.Result != pb.CancelResult_CANCEL_RESULT_UNKNOWN {
			t.Fatalf("cancel = %v, %v; want UNKNOWN", resp, err)
		}
		if after := e.revision(t); after != before {
			t.Fatalf("etcd revision moved %d -> %d", before, after)
		}
	})
	if e.state(t, b.CallId) != pb.CallState_CALL_STATE_RUNNING {
		t.Fatal("the real call was touched")
	}
	h.release <- worker.Text("ok")
	if ev := s.final(t); ev.GetResult() == nil {
		t.Fatalf("final = %v, want result", ev)
	}
	t.Run("completed call", func(t *testing.T) {
		before := e.revision(t)
		if got := e.cancel(t, e.c, k, "late"); got != pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED {
			t.Fatalf("cancel = %v", got)
		}
		if after := e.revision(t); after != before+1 {
			t.Fatalf("first late cancel: revision %d -> %d, want one cancel_lost write", before, after)
		}
		before = e.revision(t)
		if got := e.cancel(t, e.c, k, "later"); got != pb.CancelResult_CANCEL_RESULT_ALREADY_COMPLETED {
			t.Fatalf("cancel = %v", got)
		}
		if after := e.revision(t); after != before {
			t.Fatalf("second late cancel wrote: revision %d -> %d", before, after)
		}
	})
}

// A reason is stored stripped of control characters and cut to 1 KiB.
func TestReasonSanitized(t *testing.T) {
	e := newEnv(t, envOptions{})
	k := key("conn:a", num(1))
	b := e.begin(t, e.c, k, "hold")
	s := e.execute(t, b, "hold", `{}`)
	e.hold.next(t)
	long := "\x1b[31mred\x1b[0m\nline\x00" + strings.Repeat("é", 1000)
	e.cancel(t, e.c, k, long)
	s.final(t)
	as := e.audits(t, b.CallId)
	want := "[31mred[0mline" + strings.Repeat("é", (1024-len("[31mred[0mline"))/2)
	if len(as) != 1 || as[0].Reason != want {
		t.Fatalf("reason = %q (%d bytes), want %d bytes", as[0].Reason, len(as[0].Reason), len(want))
	}
}
