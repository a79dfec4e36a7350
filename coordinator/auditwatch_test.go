package coordinator_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
)

// Regression (issue 14): WatchAudit replayed at most 10,000 records and
// then watched from the revision after them, silently skipping the rest.
// It now pages through them all (here, three pages of 1,000), then
// follows new records with no gap.
func TestWatchAuditPagesWithoutAGap(t *testing.T) {
	const old = 2500 // more than two pages
	e := newEnv(t, envOptions{})
	since := time.Now().UTC().Add(-time.Hour)
	for i := 0; i < old; i += 100 {
		var puts []clientv3.Op
		for j := i; j < i+100; j++ {
			at := since.Add(time.Duration(j) * time.Millisecond)
			id := fmt.Sprintf("%032x", j)
			a, _ := json.Marshal(coordinator.AuditRecord{CallID: id, Scope: "conn:old", RequestID: json.RawMessage("1"), Outcome: "completed", SettledAt: at, RequestedAt: at})
			puts = append(puts, clientv3.OpPut(fmt.Sprintf("%saudit/%020d-%s", prefix, at.UnixNano(), id), string(a)))
		}
		if _, err := e.cli.Txn(t.Context()).Then(puts...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := e.c.WatchAudit(t.Context(), &pb.WatchAuditRequest{Since: timestamppb.New(since)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range old {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if want := fmt.Sprintf("%032x", i); r.Record.CallId != want {
			t.Fatalf("record %d is %s, want %s", i, r.Record.CallId, want)
		}
	}
	b := e.begin(t, e.c, key("conn:new", num(1)), "hold")
	if _, err := e.c.Complete(t.Context(), &pb.CompleteRequest{Call: &pb.CallRef{CallId: b.CallId, Fence: b.Fence, Worker: b.Worker}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || r.Record.CallId != b.CallId {
		t.Fatalf("after the replay: %v, %v; want the new call's record", r, err)
	}
}
