// Package etcdtest runs real embedded etcd members for tests: a single
// member, a cluster whose members can be stopped to exercise faults, or
// a member restarted on its own data (Restartable).
package etcdtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/mcpcancel/mcpcancel/internal/embedetcd"
)

// Cluster is a set of embedded etcd members started for one test.
type Cluster struct {
	Members []*embedetcd.Member
	t       testing.TB
}

// Options tunes a test cluster.
type Options struct {
	// Fsync turns fsync on, as in production. Off by default in tests.
	Fsync bool
}

// Start starts an n-member cluster with fast elections and registers its
// shutdown with t.Cleanup.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	peers, err := embedetcd.FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	var initial []string
	for i, p := range peers {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, p))
	}
	c := &Cluster{t: t}
	// One member elects itself at once; several need elections that a
	// loaded CI machine (2 cores, -race) does not starve into flapping.
	tick, election := uint(10), uint(50)
	if n > 1 {
		tick, election = 25, 400
	}
	started := make(chan result, n)
	for i := range n {
		go func() {
			m, err := embedetcd.Start(t.Context(), embedetcd.Options{
				Dir:            t.TempDir(),
				Name:           fmt.Sprintf("m%d", i),
				PeerAddr:       peers[i],
				InitialCluster: strings.Join(initial, ","),
				TickMs:         tick,
				ElectionMs:     election,
				NoFsync:        !opts.Fsync,
				Logger:         zap.NewNop(),
			})
			started <- result{m, err}
		}()
	}
	for range n {
		r := <-started
		if r.err != nil {
			t.Error(r.err)
			continue
		}
		c.Members = append(c.Members, r.m)
	}
	t.Cleanup(c.Close)
	if t.Failed() {
		t.FailNow()
	}
	return c
}

type result struct {
	m   *embedetcd.Member
	err error
}

// Single starts a one-member cluster.
func Single(t testing.TB) *Cluster { return Start(t, 1, Options{}) }

// Endpoints lists every member's client URL.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL())
	}
	return eps
}

// Client returns a client to every member, closed at test end.
func (c *Cluster) Client() *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

// Leader returns the index of the member that is the Raft leader, or -1.
func (c *Cluster) Leader() int {
	for i, m := range c.Members {
		if m.Etcd.Server.Leader() == m.Etcd.Server.MemberID() {
			return i
		}
	}
	return -1
}

// Close stops every member. It is idempotent.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		m.Close()
	}
}

// IgnoreLeaks are the goleak options of a test package that runs an
// embedded etcd and HTTP clients: goroutines that belong to etcd's
// server for a moment after Close, and idle keep-alive connections.
func IgnoreLeaks(more ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{
		goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).purgeFile"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}, more...)
}
