package robustness

import (
	"context"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
	"github.com/mcpcancel/mcpcancel/test/robustness/linearize"
)

// TestLatePlacement: a decision by placement that comes after the guards
// of a created record expired must not create one. Past the call's
// deadline, the Begin's abandonment (abandoned/<begin id>, on Begin's
// lease) and a record created before (on the retention lease) are gone
// from etcd; nothing else stops createTxn. It fails while the
// coordinator does not bound a decision by placement by the call's
// deadline (reported with issue 34 item 7), so it runs only with
// -late-placement.
func TestLatePlacement(t *testing.T) {
	if !*late {
		t.Skip("pass -late-placement")
	}
	bins.once.Do(func() { buildBins(binDir) })
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, ClusterOptions{Bin: bins.mcpcancel, EtcdBin: bins.etcdmember, Dir: dir,
		LeaseTTL: leaseTTL, Retention: retention, CallTimeout: callTimeout, Tokens: 10})
	if c != nil {
		defer c.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	op, err := newOperator(c, true)
	if err != nil {
		t.Fatal(err)
	}
	defer op.close()
	cl := op.clients[0]
	key := func(n int64) *pb.CallKey {
		return &pb.CallKey{Scope: "conn:late", RequestId: &pb.RequestId{Kind: &pb.RequestId_Number{Number: n}}}
	}
	complete := func(p *pb.BeginResponse) (pb.SettleResult, error) {
		resp, err := cl.Complete(ctx, &pb.CompleteRequest{Call: callRef(p)})
		return resp.GetResult(), err
	}
	gone := func(what, k string) {
		t.Helper()
		err := waitFor(ctx, 2*time.Minute, what, func() bool {
			resp, err := c.Etcd.Get(ctx, k)
			return err == nil && len(resp.Kvs) == 0
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("abandoned", func(t *testing.T) {
		k, beginID := key(1), randid.New(16)
		if r, err := cl.AbandonBegin(ctx, abandonRequest(k, beginID)); err != nil || r.GetBegun() {
			t.Fatalf("AbandonBegin first = %v, %v; want not begun", r, err)
		}
		req := op.beginRequest(k, "")
		req.BeginId = beginID
		p, _, err := op.rec.Start(ctx, cl, req, nil)
		if p == nil || status.Code(err) != codes.Aborted {
			t.Fatalf("Start of an abandoned Begin = %v, %v; want placed, then ABANDONED", p, err)
		}
		gone("the abandonment expired", prefix+"abandoned/"+beginID)
		if r, err := complete(p); status.Code(err) != codes.NotFound {
			t.Errorf("Complete by placement of an abandoned call, %v after its deadline = %v, %v; want UNKNOWN_CALL",
				time.Since(p.GetDeadline().AsTime()).Round(time.Second), r, err)
		}
	})
	t.Run("created twice", func(t *testing.T) {
		req := op.beginRequest(key(2), "")
		req.BeginId = randid.New(16)
		var failed pb.SettleResult
		p, _, err := op.rec.Start(ctx, cl, req, func(p *pb.BeginResponse) {
			r, err := cl.Fail(ctx, &pb.FailRequest{Call: callRef(p), Initiator: pb.Initiator_INITIATOR_TOOL})
			if err != nil {
				t.Errorf("Fail by placement: %v", err)
			}
			failed = r.GetResult()
		})
		if p == nil || err != nil || failed != pb.SettleResult_SETTLE_RESULT_WON {
			t.Fatalf("Start = %v, %v, its Fail by placement %v; want placed, begun, WON", p, err, failed)
		}
		gone("the record expired", prefix+"calls/"+p.GetCallId())
		if r, err := complete(p); err == nil && r == pb.SettleResult_SETTLE_RESULT_WON {
			t.Errorf("Complete by placement of a call that FAILED, %v after its deadline, won: its record was created again",
				time.Since(p.GetDeadline().AsTime()).Round(time.Second))
		}
	})
	// The model says the same of the operator's history.
	h, err := op.rec.History(nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := linearize.Check(linearize.Options{Retention: true}, h, time.Minute, "")
	t.Logf("the operator's history: %v (%v)", r, err)
	if r.Result != porcupine.Ok {
		t.Errorf("the operator's history is not linearizable")
	}
}
