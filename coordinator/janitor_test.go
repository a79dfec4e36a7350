package coordinator_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/mcpcancel/mcpcancel/api/mcpcancel/v1"
	"github.com/mcpcancel/mcpcancel/coordinator"
	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
	"github.com/mcpcancel/mcpcancel/internal/testcluster"
	"github.com/mcpcancel/mcpcancel/worker"
)

// Regression (issue 14): one call record that did not decode stopped the
// janitor's round, and every lost call after it stayed open. The janitor
// now logs and skips it.
func TestJanitorSkipsACorruptRecord(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.begin(t, e.c, key("conn:janitor", num(1)), "hold")
	b := e.begin(t, e.c, key("conn:janitor", num(2)), "hold")
	bad, good := a, b
	if b.CallId < a.CallId { // the janitor reads owners in key order: break the first
		bad, good = b, a
	}
	if _, err := e.cli.Put(t.Context(), prefix+"calls/"+bad.CallId, "{not json"); err != nil {
		t.Fatal(err)
	}
	e.w.Stop() // its lease is revoked: both calls are the janitor's
	testcluster.WaitFor(t, "the janitor to fail the intact call", func() bool {
		return e.state(t, good.CallId) == pb.CallState_CALL_STATE_FAILED
	})
	if got := outcomes(e.audits(t, good.CallId)); len(got) != 1 || got[0] != "failed" {
		t.Fatalf("audit = %v, want [failed]", got)
	}
}

// A janitor read caught by an etcd leader's death waits out its whole
// timeout, as etcd answers nothing for a read lost with its leader: here
// an interceptor holds the janitor's first round read after the Begin
// until its context ends. The read is bounded at half a lease TTL, so
// the stray is still failed about a lease TTL past its deadline, not
// after OpTimeout (10 s here).
func TestJanitorReadHeldByEtcd(t *testing.T) {
	const ttl = 2 * time.Second
	var armed atomic.Bool
	held := make(chan struct{}, 1)
	cl := etcdtest.Single(t)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cl.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if txn, ok := req.(*etcdpb.TxnRequest); ok && len(txn.GetSuccess()) > 0 &&
				string(txn.GetSuccess()[0].GetRequestRange().GetKey()) == prefix+"owners/" && armed.CompareAndSwap(true, false) {
				held <- struct{}{}
				<-ctx.Done() // etcd never answers it
				return ctx.Err()
			}
			return invoke(ctx, m, req, reply, cc, opts...)
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	co := testcluster.StartCoordinator(t, cli, coordinator.Options{Name: "a", LeaseTTL: ttl, OpTimeout: 10 * time.Second})
	hold := newHoldTool(false)
	testcluster.StartWorker(t, worker.Options{Coordinator: co.Addr, Name: "w1"}, hold.register)
	c := co.Client(t)
	waitTools(t, c, "hold")
	// Begun and never executed: its gateway is gone, so only the janitor
	// ends it, a lease TTL past its deadline.
	b, err := c.Begin(t.Context(), &pb.BeginRequest{Key: key("conn:stray", num(1)), Tool: "hold", Principal: "alice", Timeout: durationpb.New(500 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	<-held
	deadline := b.GetDeadline().AsTime()
	testcluster.WaitFor(t, "the janitor to fail the stray", func() bool {
		got, err := c.GetCall(t.Context(), &pb.GetCallRequest{Target: &pb.GetCallRequest_CallId{CallId: b.CallId}})
		return err == nil && got.GetCall().GetState() == pb.CallState_CALL_STATE_FAILED
	})
	late := time.Since(deadline)
	t.Logf("failed %v past its deadline", late.Round(time.Millisecond))
	if bound := 2*ttl + time.Second; late > bound {
		t.Fatalf("the stray failed %v past its deadline, want within %v (a TTL, the held read's half TTL, slack); OpTimeout is 10 s", late, bound)
	}
}
