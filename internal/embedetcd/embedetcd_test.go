package embedetcd

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).purgeFile"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
	)
}

// A member compacts its history on its own: a revision older than the
// retention can no longer be read.
func TestMemberCompactsItself(t *testing.T) {
	m, err := Start(t.Context(), Options{Dir: t.TempDir(), Fast: true, NoFsync: true, CompactionRetention: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	first, err := cli.Put(t.Context(), "k", "1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		// Keep writing: periodic compaction compacts to a revision seen
		// a retention ago, so history must move on.
		if _, err := cli.Put(ctx, "k", "2"); err != nil {
			t.Fatal(err)
		}
		_, err := cli.Get(ctx, "k", clientv3.WithRev(first.Header.Revision))
		if errors.Is(err, rpctypes.ErrCompacted) {
			return
		}
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the member never compacted its history")
		case <-tick.C:
		}
	}
}

// A port that is taken fails the start with an error AddrInUse knows, so
// that a port Start picked, and lost to another process before etcd bound
// it, is picked again; a member given that port is not retried.
func TestTakenPortIsAddrInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, err = Start(t.Context(), Options{Dir: t.TempDir(), Fast: true, NoFsync: true, ClientAddr: held.Addr().String()})
	if !AddrInUse(err) {
		t.Fatalf("Start on a taken client port = %v, want an address-in-use error", err)
	}
	if AddrInUse(ErrNotReady) {
		t.Fatal("AddrInUse(ErrNotReady) = true")
	}
}
