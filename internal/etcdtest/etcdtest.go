// Package etcdtest runs real embedded etcd members for tests: a single
// member, a cluster whose members can be stopped to exercise faults, or
// a member restarted on its own data (Restartable).
package etcdtest

import (
	"context"
	"errors"
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
	c := &Cluster{t: t}
	t.Cleanup(c.Close)
	for try := 1; ; try++ {
		members, err := start(t, n, opts)
		if err == nil {
			c.Members = members
			return c
		}
		if !embedetcd.AddrInUse(err) || try == startTries {
			t.Fatal(err)
		}
	}
}

// startTries bounds how often Start picks fresh peer ports for a cluster
// one of whose picked ports another process took before etcd bound it.
const startTries = 5

// start starts n members on freshly picked peer ports. If one fails, the
// others are stopped (they would wait for it in vain) and the first error
// is returned.
func start(t testing.TB, n int, opts Options) ([]*embedetcd.Member, error) {
	peers, err := embedetcd.FreeAddrs(n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i, p := range peers {
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i, p))
	}
	// One member elects itself at once; several need elections that a
	// loaded CI machine (2 cores, -race) does not starve into flapping.
	tick, election := uint(10), uint(50)
	if n > 1 {
		tick, election = 25, 400
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan result, n)
	for i := range n {
		dir := t.TempDir()
		go func() { // owned: answers on started, which start drains
			m, err := embedetcd.Start(ctx, embedetcd.Options{
				Dir:            dir,
				Name:           fmt.Sprintf("m%d", i),
				PeerAddr:       peers[i],
				InitialCluster: strings.Join(initial, ","),
				TickMs:         tick,
				ElectionMs:     election,
				NoFsync:        !opts.Fsync,
				Logger:         zap.NewNop(),
			})
			if err != nil {
				cancel() // the others cannot form the cluster without it
			}
			started <- result{m, err}
		}()
	}
	var members []*embedetcd.Member
	var first error
	for range n {
		r := <-started
		switch {
		case r.err == nil:
			members = append(members, r.m)
		case first == nil || errors.Is(first, context.Canceled):
			first = r.err
		}
	}
	if first != nil {
		for _, m := range members {
			m.Close()
		}
		return nil, first
	}
	return members, nil
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
