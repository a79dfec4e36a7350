package coordinator_test

import (
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mcpcancel/mcpcancel/api/client"
	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/internal/randid"
)

// A gateway that gave up on a Begin's reply abandons it. Here the Begin
// reaches etcd only after that, as one held in a paused replica's queue
// does: it commits nothing, and the only key the pair leaves is the
// abandonment itself. The key stays free for the client's next request.
func TestAbandonedBeginNeverCommits(t *testing.T) {
	e := newEnv(t, envOptions{})
	k := key("conn:abandon-first", num(1))
	id := randid.New(16)
	before := etcdKeys(t, e.cli)

	got, err := e.c.AbandonBegin(t.Context(), abandonReq(k, id))
	if err != nil {
		t.Fatal(err)
	}
	if got.Begun {
		t.Fatalf("abandon = %v, want not begun", got)
	}
	_, err = e.c.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: "hold", Principal: "alice", Gateway: "g1", BeginId: id})
	if !client.Is(err, client.ErrAbandoned) {
		t.Fatalf("the abandoned Begin: %v, want BEGIN_ABANDONED", err)
	}
	var added []string // of the keys a Begin or a decision writes
	for k := range etcdKeys(t, e.cli) {
		for _, p := range []string{"calls/", "index/", "running/", "owners/", "audit/", "abandoned/"} {
			if strings.Contains(k, p) && !before[k] {
				added = append(added, k)
			}
		}
	}
	if len(added) != 1 || !strings.HasSuffix(added[0], "abandoned/"+id) {
		t.Fatalf("keys written: %q, want only the abandonment", added)
	}
	if _, err := e.c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_Key{Key: k}}); !client.Is(err, client.ErrUnknownCall) {
		t.Fatalf("GetCall by key: %v, want UNKNOWN_CALL", err)
	}
	// The client, told the call could not start, may send the id again.
	again := e.begin(t, e.c, k, "hold")
	if e.state(t, again.CallId) != pb.CallState_CALL_STATE_RUNNING {
		t.Fatal("the key's next call is not running")
	}
}

// The Begin committed before its gateway gave up on the reply: abandoning
// it fails the call, once, and says so when asked again (its own reply
// lost). A cancellation that settled the call first stands, and the
// gateway is told whose it was.
func TestAbandonAfterBeginFailsTheCall(t *testing.T) {
	e := newEnv(t, envOptions{})
	k := key("conn:abandon-late", num(1))
	id := randid.New(16)
	b, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: "hold", Principal: "alice", Gateway: "g1", BeginId: id})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := e.c.AbandonBegin(t.Context(), abandonReq(k, id))
		if err != nil {
			t.Fatal(err)
		}
		if !got.Begun || got.CallId != b.CallId || got.Result != pb.SettleResult_SETTLE_RESULT_WON {
			t.Fatalf("abandon = %v, want begun %s, failed by this abandonment", got, b.CallId)
		}
	}
	if s := e.state(t, b.CallId); s != pb.CallState_CALL_STATE_FAILED {
		t.Fatalf("state %v, want failed", s)
	}
	if got := outcomes(e.audits(t, b.CallId)); len(got) != 1 || got[0] != "failed" {
		t.Fatalf("audit %v, want one failed", got)
	}

	k2 := key("conn:abandon-late", num(2))
	id2 := randid.New(16)
	if _, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: k2, Tool: "hold", Principal: "alice", Gateway: "g1", BeginId: id2}); err != nil {
		t.Fatal(err)
	}
	if r := e.cancel(t, e.c, k2, "the client left"); r != pb.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("cancel = %v", r)
	}
	got, err := e.c.AbandonBegin(t.Context(), abandonReq(k2, id2))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Begun || got.Result != pb.SettleResult_SETTLE_RESULT_ALREADY_CANCELLED ||
		got.WinnerInitiator != pb.Initiator_INITIATOR_CLIENT || got.WinnerReason != "the client left" {
		t.Fatalf("abandon = %v, want the client's cancel named as the winner", got)
	}
}

// Begin and its abandonment race, through two replicas: exactly one wins
// each time. Either the Begin committed and its call is failed, or it
// committed nothing; never a Begin that succeeded while its abandonment
// found nothing, which is the call a gateway told its client could not
// start that something else (the client's leaving) settles later.
func TestBeginRacesItsAbandonment(t *testing.T) {
	e := newEnv(t, envOptions{replicas: 2})
	other := e.coords[1].Client(t)
	var begun, never int
	for i := range 40 {
		k := key("conn:abandon-race", num(int64(i)))
		id := randid.New(16)
		var b *pb.BeginResponse
		var berr error
		var wg sync.WaitGroup
		wg.Go(func() {
			b, berr = e.c.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: "hold", Principal: "alice", Gateway: "g1", BeginId: id})
		})
		got, err := other.AbandonBegin(t.Context(), abandonReq(k, id))
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case berr == nil && got.Begun && got.CallId == b.CallId && got.Result == pb.SettleResult_SETTLE_RESULT_WON:
			if s := e.state(t, b.CallId); s != pb.CallState_CALL_STATE_FAILED {
				t.Fatalf("round %d: begun and abandoned, but the call is %v", i, s)
			}
			begun++
		case client.Is(berr, client.ErrAbandoned) && !got.Begun:
			if _, err := e.c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_Key{Key: k}}); !client.Is(err, client.ErrUnknownCall) {
				t.Fatalf("round %d: the abandoned Begin left a call: %v", i, err)
			}
			never++
		default:
			t.Fatalf("round %d: Begin %v, %v; abandon %v: not exactly one winner", i, b, berr, got)
		}
	}
	t.Logf("the Begin won %d times, its abandonment %d", begun, never)
}

// An abandonment names a Begin by its id, which must be one.
func TestAbandonBeginChecksItsInput(t *testing.T) {
	e := newEnv(t, envOptions{})
	k := key("conn:abandon-bad", num(1))
	for _, req := range []*pb.AbandonBeginRequest{
		{Key: k, BeginId: "not hex", Initiator: pb.Initiator_INITIATOR_DISCONNECT},
		{Key: k, Initiator: pb.Initiator_INITIATOR_DISCONNECT},
		{Key: k, BeginId: randid.New(16)},
		{BeginId: randid.New(16), Initiator: pb.Initiator_INITIATOR_DISCONNECT},
	} {
		if _, err := e.c.AbandonBegin(t.Context(), req); !client.Is(err, client.ErrInvalidArgument) {
			t.Errorf("AbandonBegin(%v) = %v, want INVALID_ARGUMENT", req, err)
		}
	}
	if _, err := e.c.Begin(t.Context(), &pb.BeginRequest{Key: k, Tool: "hold", Principal: "alice", BeginId: "xyz"}); !client.Is(err, client.ErrInvalidArgument) {
		t.Errorf("Begin with a bad begin_id = %v, want INVALID_ARGUMENT", err)
	}
}

func abandonReq(k *pb.CallKey, id string) *pb.AbandonBeginRequest {
	return &pb.AbandonBeginRequest{Key: k, BeginId: id, Initiator: pb.Initiator_INITIATOR_DISCONNECT, Reason: "the gateway lost Begin's reply"}
}

// etcdKeys lists every key in etcd.
func etcdKeys(t *testing.T, cli *clientv3.Client) map[string]bool {
	t.Helper()
	resp, err := cli.Get(t.Context(), "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = true
	}
	return out
}
