package coordinator

import (
	"bytes"
	"context"
	"testing"
	"time"

	pbetcd "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/mcpcancel/mcpcancel/internal/etcdtest"
)

// holdTxnsOn is an etcd client interceptor that holds every Txn putting
// key until release is closed, as etcd holds a proposal lost with its
// leader until the request times out; held gets a token for each.
func holdTxnsOn(key string, held chan<- struct{}, release <-chan struct{}) grpc.DialOption {
	return grpc.WithUnaryInterceptor(func(ctx context.Context, m string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if txn, ok := req.(*pbetcd.TxnRequest); ok && putsKey(txn, key) {
			held <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return invoke(ctx, m, req, reply, cc, opts...)
	})
}

func putsKey(txn *pbetcd.TxnRequest, key string) bool {
	for _, op := range txn.GetSuccess() {
		if bytes.Equal(op.GetRequestPut().GetKey(), []byte(key)) {
			return true
		}
		if nested := op.GetRequestTxn(); nested != nil && putsKey(nested, key) {
			return true
		}
	}
	return false
}

// A batch etcd holds (a proposal lost as its leader died, which waits out
// the request's whole timeout) holds up only its own decisions: after
// stallAfter the next batch goes out beside it and commits, and the held
// one is answered when etcd lets it go. Before, one lost proposal stalled
// every decision of the replica for OpTimeout (the fault harness saw the
// janitor's strays settled 8 s past their deadline).
func TestGroupCommitStalledBatchHoldsUpOnlyItself(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: etcdtest.Single(t).Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{holdTxnsOn("/stall/held", held, release)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	e := &committerEnv{t: t, cli: cli, c: newCommitter(cli, 5*time.Second)}
	e.c.stallAfter = 50 * time.Millisecond
	e.start()
	stuck := e.queueFree("/stall/held")
	<-held
	later := e.queueFree("/stall/free")
	select {
	case <-later.done:
	case <-time.After(3 * time.Second):
		t.Fatal("a decision queued behind a held batch was not answered within 3 s")
	}
	e.wantWon(later, true)
	select {
	case <-stuck.done:
		t.Fatal("the held decision was answered while etcd held it")
	default:
	}
	if got, err := cli.Get(t.Context(), "/stall/held"); err != nil || len(got.Kvs) != 0 {
		t.Fatalf("the held decision's key: %v %v, want none yet", got, err)
	}
	close(release)
	e.wantWon(stuck, true)
}
