package coordinator_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
)

// retryEnv is the hold tool's worker w1 plus two fake workers, i1 and i2,
// that vouch for the tool "idem" being idempotent. i1 also offers "hold",
// without vouching for it.
func retryEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, envOptions{})
	attachFakeTools(t, e.c, "i1", &pb.Tool{Name: "idem", Idempotent: true}, &pb.Tool{Name: "hold"})
	attachFakeTools(t, e.c, "i2", &pb.Tool{Name: "idem", Idempotent: true})
	testcluster.WaitFor(t, "the coordinator's view of i1 and i2", func() bool {
		resp, err := e.c.ListWorkers(t.Context(), &pb.ListWorkersRequest{})
		if err != nil {
			return false
		}
		n := 0
		for _, w := range resp.GetWorkers() {
			if w.GetName() == "i1" || w.GetName() == "i2" {
				n++
			}
		}
		return n == 2
	})
	return e
}

// lose fails a call as a gateway does when it loses the call's worker.
func (e *env) lose(t *testing.T, b *pb.BeginResponse, who pb.Initiator) {
	t.Helper()
	resp, err := e.c.Fail(t.Context(), &pb.FailRequest{
		Call:      &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker},
		Initiator: who, Reason: "execute stream lost",
	})
	if err != nil || resp.Result != pb.SettleResult_SETTLE_RESULT_WON {
		t.Fatalf("fail = %v, %v", resp, err)
	}
}

func retryReq(k *pb.CallKey, tool, of string) *pb.BeginRequest {
	return &pb.BeginRequest{Key: k, Tool: tool, Principal: "alice", Gateway: "g1", RetryOf: of}
}

// A call of an idempotent tool failed with its worker lost is placed once
// more under the same key, on the other worker that vouches for the tool,
// never past the first call's deadline; the audit links the two.
func TestRetryPlacesTheCallOnAnotherWorker(t *testing.T) {
	e := retryEnv(t)
	k := key("conn:r", num(1))
	first, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: "idem", Principal: "alice", Gateway: "g1", Timeout: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if !first.Idempotent {
		t.Fatal("Begin did not say the tool is idempotent")
	}
	e.lose(t, first, pb.Initiator_INITIATOR_WORKER_LOST)

	req := retryReq(k, "idem", first.CallId)
	req.Timeout = durationpb.New(time.Hour)
	second, err := e.c.Begin(t.Context(), req)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if second.Worker == first.Worker || second.CallId == first.CallId || !second.Idempotent {
		t.Fatalf("retry placed on %s as %s (idempotent %v); the first ran on %s as %s",
			second.Worker, second.CallId, second.Idempotent, first.Worker, first.CallId)
	}
	if !second.Deadline.AsTime().Equal(first.Deadline.AsTime()) {
		t.Fatalf("retry deadline %v; want the first call's %v", second.Deadline.AsTime(), first.Deadline.AsTime())
	}
	got, err := e.c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_Key{Key: k}})
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Call; c.CallId != second.CallId || c.RetryOf != first.CallId || c.State != pb.CallState_CALL_STATE_RUNNING {
		t.Fatalf("the key names %s (retry of %q, %v); want the running retry %s of %s", c.CallId, c.RetryOf, c.State, second.CallId, first.CallId)
	}
	if r := e.cancel(t, e.c, k, "changed my mind"); r != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel of the retry = %v", r)
	}
	as := e.audits(t, second.CallId)
	if len(as) != 1 || as[0].Outcome != "cancelled" || as[0].RetryOf != first.CallId {
		t.Fatalf("the retry's audit = %+v; want one cancelled record naming %s", as, first.CallId)
	}
	if as := e.audits(t, first.CallId); len(as) != 1 || as[0].Outcome != "failed" || as[0].Initiator != "worker_lost" || as[0].RetryOf != "" {
		t.Fatalf("the first call's audit = %+v; want one failed, worker_lost record", as)
	}
}

// Begin refuses a retry, with reason NOT_RETRYABLE and no write, unless the
// call it names may be retried.
func TestRetryRefused(t *testing.T) {
	e := retryEnv(t)
	var n int64
	next := func() *pb.CallKey { n++; return key("conn:r", num(n)) }
	begun := func(tool string) (*pb.CallKey, *pb.BeginResponse) { k := next(); return k, e.begin(t, e.c, k, tool) }
	// lost begins a call of tool and fails it for who.
	lost := func(tool string, who pb.Initiator) (*pb.CallKey, *pb.BeginResponse) {
		k, b := begun(tool)
		e.lose(t, b, who)
		return k, b
	}
	cases := []struct {
		name string
		// setup returns the key and call to retry.
		setup func() (*pb.CallKey, string)
		tool  string
		want  string
	}{
		{"still running", func() (*pb.CallKey, string) {
			k, b := begun("idem")
			return k, b.CallId
		}, "idem", "is running"},
		{"failed by its tool", func() (*pb.CallKey, string) {
			k, b := lost("idem", pb.Initiator_INITIATOR_TOOL)
			return k, b.CallId
		}, "idem", "failed by tool"},
		{"completed", func() (*pb.CallKey, string) {
			k, b := begun("idem")
			if _, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker}}); err != nil {
				t.Fatal(err)
			}
			return k, b.CallId
		}, "idem", "is completed"},
		{"cancelled", func() (*pb.CallKey, string) {
			k, b := begun("idem")
			e.cancel(t, e.c, k, "no")
			return k, b.CallId
		}, "idem", "is cancelled"},
		{"already a retry", func() (*pb.CallKey, string) {
			k, b := lost("idem", pb.Initiator_INITIATOR_WORKER_LOST)
			r, err := e.c.Begin(t.Context(), retryReq(k, "idem", b.CallId))
			if err != nil {
				t.Fatal(err)
			}
			e.lose(t, r, pb.Initiator_INITIATOR_WORKER_LOST)
			return k, r.CallId
		}, "idem", "already a retry"},
		{"another key's call", func() (*pb.CallKey, string) {
			_, b := lost("idem", pb.Initiator_INITIATOR_WORKER_LOST)
			return next(), b.CallId
		}, "idem", "no call"},
		{"another tool", func() (*pb.CallKey, string) {
			k, b := lost("idem", pb.Initiator_INITIATOR_WORKER_LOST)
			return k, b.CallId
		}, "hold", "another principal's or tool's"},
		{"not vouched for", func() (*pb.CallKey, string) {
			// hold runs on w1 or i1, and neither vouches for it.
			k, b := lost("hold", pb.Initiator_INITIATOR_WORKER_LOST)
			if b.Worker == "w1" {
				// w1 answers the stop order with a write of its own.
				testcluster.WaitFor(t, "w1's stop report", func() bool {
					resp, err := e.cli.Get(t.Context(), prefix+"owners/w1/"+b.CallId)
					return err == nil && len(resp.Kvs) == 0
				})
			}
			return k, b.CallId
		}, "hold", "vouches"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, of := tc.setup()
			before := e.revision(t)
			_, err := e.c.Begin(t.Context(), retryReq(k, tc.tool, of))
			if status.Code(err) != codes.FailedPrecondition || coordinator.ErrorReason(err) != "NOT_RETRYABLE" || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("retry = %v (reason %q); want NOT_RETRYABLE saying %q", err, coordinator.ErrorReason(err), tc.want)
			}
			if after := e.revision(t); after != before {
				t.Fatalf("a refused retry wrote to etcd (revision %d → %d)", before, after)
			}
		})
	}
	_, err := e.c.Begin(t.Context(), retryReq(next(), "idem", "not-a-call-id"))
	if coordinator.ErrorReason(err) != "INVALID_ARGUMENT" {
		t.Fatalf("retry_of not a call id: %v", err)
	}
}

// Two retries of the same lost call at once: exactly one is placed.
func TestRetryPlacedOnce(t *testing.T) {
	e := retryEnv(t)
	for i := range int64(20) {
		k := key("conn:once", num(i))
		b := e.begin(t, e.c, k, "idem")
		e.lose(t, b, pb.Initiator_INITIATOR_WORKER_LOST)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for j := range errs {
			wg.Go(func() { _, errs[j] = e.c.Begin(t.Context(), retryReq(k, "idem", b.CallId)) })
		}
		wg.Wait()
		placed := 0
		for _, err := range errs {
			switch {
			case err == nil:
				placed++
			case coordinator.ErrorReason(err) != "NOT_RETRYABLE":
				t.Fatalf("the losing retry failed with %v; want NOT_RETRYABLE", err)
			}
		}
		if placed != 1 {
			t.Fatalf("round %d: %d retries placed; want 1 (%v)", i, placed, errs)
		}
	}
}
