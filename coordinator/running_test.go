package coordinator_test

import (
	"testing"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
)

// A replica's cache of the calls it began is only a guess. Here it names
// an earlier call that used the same request id and has settled: the
// cancel must still reach the call running under that id now, and leave
// no trace on the earlier one.
func TestCancelThroughStaleCache(t *testing.T) {
	e := newEnv(t, envOptions{})
	srv := e.coords[0].Server
	k := key("conn:stale", num(1))

	first := e.begin(t, e.c, k, "hold")
	old := e.execute(t, first, "hold", `{}`)
	e.hold.next(t)
	if got := e.cancel(t, e.c, k, "first"); got != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("first cancel = %v", got)
	}
	old.final(t)
	oldRec := e.get(t, prefix+"calls/"+first.CallId)

	second := e.begin(t, e.c, k, "hold")
	cur := e.execute(t, second, "hold", `{}`)
	h := e.hold.next(t)
	srv.CacheStale(oldRec, prefix+"index/conn:stale/n:1", first.Fence)

	resp, err := e.c.Cancel(t.Context(), &pb.CancelRequest{
		Target: &pb.CancelRequest_Key{Key: k}, Initiator: pb.Initiator_INITIATOR_CLIENT, Reason: "second",
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Result != pb.CancelResult_CANCEL_RESULT_CANCELLED || resp.CallId != second.CallId {
		t.Fatalf("cancel through a stale cache = %v on %s, want CANCELLED on the running call %s", resp.Result, resp.CallId, second.CallId)
	}
	waitDone(t, h)
	if f := cur.final(t); f.GetCancelled() == nil {
		t.Fatalf("running call ended with %v, want cancelled", f)
	}
	if got := outcomes(e.audits(t, first.CallId)); len(got) != 1 || got[0] != "cancelled" {
		t.Fatalf("the settled call's audit = %v, want only its own cancellation", got)
	}
	if got := outcomes(e.audits(t, second.CallId)); len(got) != 1 || got[0] != "cancelled" {
		t.Fatalf("the running call's audit = %v, want one cancellation", got)
	}
	if n := srv.CachedCalls(); n != 0 {
		t.Fatalf("%d calls left in the cache after both settled", n)
	}
}

// get reads a key's value from etcd.
func (e *env) get(t *testing.T, key string) []byte {
	t.Helper()
	resp, err := e.cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d keys)", key, err, len(resp.Kvs))
	}
	return resp.Kvs[0].Value
}
